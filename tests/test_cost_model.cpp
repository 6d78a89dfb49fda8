// The cost model against hand-worked numbers from the formulas' sources.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <numeric>

#include "optpipe/cost_model.h"
#include "optpipe/json_io.h"

using namespace optpipe;

TEST(CostModel, GptLayerMatchesThePapers) {
  const ModelSpec& m = find_model("gpt-7b").value;  // h = 4096, a = 32, s = 2048
  LayerCost c = transformer_layer_cost(m, 1);
  // [N21] 24·b·s·h²·(1 + s/6h) = 24·2048·4096²·(13/12) over the whole score matrix; a causal flash
  // kernel does half the attention's: 24·b·s·h²·(1 + s/12h).
  EXPECT_DOUBLE_EQ(c.fwd_flops, 24.0 * 2048 * 4096 * 4096 * 25 / 24);
  EXPECT_DOUBLE_EQ(c.fwd_attention_flops, 2.0 * 2048 * 2048 * 4096);
  EXPECT_DOUBLE_EQ(c.bwd_attention_flops, 3 * c.fwd_attention_flops);  // both operands' gradients, and the recompute
  EXPECT_DOUBLE_EQ(c.bwd_weight_flops, 24.0 * 2048 * 4096 * 4096);     // the matmuls only
  // [K22] flash attention: 34·s·b·h bytes; [Q23] W keeps 32·s·b·h of them.
  EXPECT_EQ(c.act_bytes, 34ll * 2048 * 4096);
  EXPECT_EQ(c.act_after_b_bytes, 32ll * 2048 * 4096);
  EXPECT_EQ(c.params, 12ll * 4096 * 4096 + 4 * 4096);

  ModelSpec no_flash = m;
  no_flash.flash_attention = false;
  // [K22] sbh(34 + 5as/h) = 2048·4096·(34 + 80); the scores computed whole: [N21]'s count.
  EXPECT_EQ(transformer_layer_cost(no_flash, 1).act_bytes, 2048ll * 4096 * 114);
  EXPECT_DOUBLE_EQ(transformer_layer_cost(no_flash, 1).fwd_flops, 24.0 * 2048 * 4096 * 4096 * 13 / 12);
  // Twice the microbatch, twice everything.
  EXPECT_EQ(transformer_layer_cost(m, 2).act_bytes, 2 * c.act_bytes);
}

TEST(CostModel, LlamaUsesGroupedKvAndSwiGlu) {
  const ModelSpec& m = find_model("llama2-70b").value;  // h 8192, 64 heads, 8 kv heads, ffn 28672
  LayerCost c = transformer_layer_cost(m, 1);
  const double h = 8192, kv = 8 * 128, f = 28672, s = 4096;
  EXPECT_DOUBLE_EQ(c.bwd_weight_flops, 2 * s * (h * (h + 2 * kv) + h * h + 3 * h * f));
  EXPECT_EQ(c.params, static_cast<int64_t>(h * (h + 2 * kv) + h * h + 3 * h * f + 4 * h));
  // ~0.86 B parameters a layer: 80 layers + embeddings ≈ 69 B.
  EXPECT_NEAR(80.0 * c.params + 2.0 * 32000 * 8192, 69e9, 1e9);
  EXPECT_LE(c.act_after_b_bytes, c.act_bytes);
}

TEST(CostModel, PartitionsCoverEveryLayer) {
  const ModelSpec& m = find_model("llama2-70b").value;
  for (int chunks : {1, 4, 16, 32}) {
    for (PartitionRule part : {PartitionRule::kEven, PartitionRule::kBalanced}) {
      std::vector<int> n = partition_layers(m, chunks, part, 1);
      ASSERT_EQ(static_cast<int>(n.size()), chunks);
      EXPECT_EQ(std::accumulate(n.begin(), n.end(), 0), 80);
    }
  }
  EXPECT_EQ(partition_layers(m, 16, PartitionRule::kEven, 1), std::vector<int>(16, 5));
  // Balanced: a heavy LM head (a 400k vocabulary costs ~7.5 layers, more than any 4–5 layer
  // chunk) shares its chunk with as few layers as it can: one (a chunk has at least one layer).
  ModelSpec big_vocab = find_model("gpt-7b").value;
  big_vocab.vocab = 400000;
  std::vector<int> b = partition_layers(big_vocab, 8, PartitionRule::kBalanced, 1);
  EXPECT_EQ(b.back(), 1);
  EXPECT_EQ(*std::min_element(b.begin(), b.end()), 1);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 32);
}

TEST(CostModel, ProblemFromModelAndCluster) {
  const ModelSpec& m = find_model("gpt-7b").value;
  Result<ClusterSpec> c = find_cluster("8xh100");
  ASSERT_TRUE(c.ok()) << c.status.message;
  PlanSpec plan;
  plan.partition = PartitionRule::kEven;
  plan.mem_budget_bytes = 60ll << 30;
  Result<Problem> p = build_problem(m, c.value, plan);
  ASSERT_TRUE(p.ok()) << p.status.message;
  EXPECT_EQ(p.value.num_devices, 8);
  EXPECT_EQ(p.value.num_microbatches, 32);
  const LayerCost layer = transformer_layer_cost(m, 1);
  const double flops_per_us = 989e6 * 0.45;
  // Stage 3 holds 4 plain layers.
  EXPECT_NEAR(p.value.stages[3].t_f_us, 4 * layer.fwd_flops / flops_per_us, 1e-6);
  EXPECT_EQ(p.value.stages[3].act_f_bytes, 4 * layer.act_bytes);
  EXPECT_EQ(p.value.devices[3].static_bytes, 16 * 4 * layer.params);                     // [R20]
  EXPECT_EQ(p.value.devices[0].static_bytes, 16 * (4 * layer.params + 51200ll * 4096));  // + embedding
  // Hop: 10 µs + 2·s·h bytes at 360 GB/s: one node's NVLink; on two nodes, InfiniBand's 50 GB/s.
  EXPECT_NEAR(p.value.t_comm_us, 10 + 2.0 * 2048 * 4096 / 360e3, 1e-9);
  Result<Problem> two_nodes = build_problem(m, find_cluster("16xh100").value, plan);
  ASSERT_TRUE(two_nodes.ok());
  EXPECT_NEAR(two_nodes.value.t_comm_us, 10 + 2.0 * 2048 * 4096 / 50e3, 1e-9);
  EXPECT_EQ(p.value.devices[5].mem_budget_bytes, 60ll << 30);
  EXPECT_GT(p.value.stages[7].t_f_us, p.value.stages[3].t_f_us);  // the LM head
}

TEST(CostModel, ClusterNamesAreChecked) {
  EXPECT_TRUE(find_cluster("16xh200").ok());
  Result<ClusterSpec> b200 = find_cluster("8xb200");
  ASSERT_TRUE(b200.ok());
  EXPECT_EQ(b200.value.num_gpus, 8);
  EXPECT_GT(b200.value.peak_tflops, find_cluster("8xh100").value.peak_tflops);
  EXPECT_NE(find_cluster("16xtpu").status.message.find("unknown GPU \"tpu\""), std::string::npos);
  EXPECT_FALSE(find_cluster("h100").ok());
  EXPECT_FALSE(find_cluster("0xh100").ok());
  EXPECT_FALSE(find_cluster("16x").ok());
  Result<ClusterSpec> c = find_cluster("64xa100-40gb");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(build_problem(find_model("gpt-7b").value, c.value, PlanSpec{}).ok());  // 64 stages > 32 layers
}

TEST(CostModel, MeasuredProfileOverridesFormulas) {
  Problem p = default_problem();
  Status st = apply_profile(R"({"format":"optpipe.profile/1","t_comm_us":7,
      "stages":[{"t_f_us":1,"act_f_bytes":100,"act_w_bytes":-40,"act_input_bytes":10},{},{},{"t_w_us":9}],
      "static_bytes":[1,2,3,4]})",
                            &p);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_DOUBLE_EQ(p.stages[0].t_f_us, 1);
  EXPECT_EQ(p.stages[0].act_b_bytes, -60);
  EXPECT_DOUBLE_EQ(p.stages[3].t_w_us, 9);
  EXPECT_DOUBLE_EQ(p.stages[1].t_f_us, default_problem().stages[1].t_f_us);  // untouched
  EXPECT_DOUBLE_EQ(p.t_comm_us, 7);
  EXPECT_EQ(p.devices[2].static_bytes, 3);

  Problem q = default_problem();
  EXPECT_NE(apply_profile(R"({"stages":[{}]})", &q).message.find("one entry per stage (4)"), std::string::npos);
  EXPECT_NE(apply_profile(R"({"stages":[{"t_f_us":-3},{},{},{}]})", &q).message.find("stages[0].t_f_us"),
            std::string::npos);
  EXPECT_NE(apply_profile(R"({"speed":1})", &q).message.find("speed: unknown field"), std::string::npos);
  EXPECT_EQ(problem_to_json(q), problem_to_json(default_problem()));  // failures change nothing
}

namespace {

// gpt-7b (32 layers, h 4096, s 2048) on `gpus` A100-80GB with the given degrees, 8 microbatches.
Problem gpt7b(int gpus, int tp, int dp, bool sequence_parallel = true, bool distributed_optimizer = true) {
  PlanSpec plan;
  plan.num_microbatches = 8;
  plan.tp = tp;
  plan.dp = dp;
  plan.sequence_parallel = sequence_parallel;
  plan.distributed_optimizer = distributed_optimizer;
  Result<Problem> p =
      build_problem(find_model("gpt-7b").value, find_cluster(std::to_string(gpus) + "xa100-80gb").value, plan);
  EXPECT_TRUE(p.ok()) << p.status.message;
  return p.value;
}

}  // namespace

TEST(CostModel, TensorParallelHalvesComputeAndParametersAndAddsItsCollectives) {
  const Problem one = gpt7b(8, 1, 1), two = gpt7b(16, 2, 1);  // both 8 pipeline stages of 4 layers
  ASSERT_EQ(one.num_devices, 8);
  ASSERT_EQ(two.num_devices, 8);
  // [S19] per layer, two all-reduces of b·s·h bf16 values in F and in B: 2 · 2(T−1)/T of them
  // over the node's 230 GB/s.
  const double all_reduces_us = 4 * 0.5 * (2048.0 * 4096 * 2) / 230e3;
  for (int s = 1; s < 7; s++) {  // the middle stages: 4 layers each, no embedding or head
    EXPECT_NEAR(two.stages[s].t_f_us, one.stages[s].t_f_us / 2 + 4 * all_reduces_us, 1e-6);
    EXPECT_NEAR(two.stages[s].t_b_us, one.stages[s].t_b_us / 2 + 4 * all_reduces_us, 1e-6);
    EXPECT_NEAR(two.stages[s].t_w_us, one.stages[s].t_w_us / 2, 1e-6);
    EXPECT_NEAR(static_cast<double>(two.devices[s].static_bytes), one.devices[s].static_bytes / 2.0, 64);
  }
  EXPECT_NEAR(static_cast<double>(two.devices[0].static_bytes), one.devices[0].static_bytes / 2.0, 64);
}

TEST(CostModel, DistributedOptimizerShardsTheOptimizerState) {
  const Problem plain = gpt7b(32, 1, 4, true, false), sharded = gpt7b(32, 1, 4, true, true);
  // [R20] 16 bytes a parameter, of them the 12 of fp32 master weights, momentum and variance
  // sharded over 4 data-parallel ranks: 4 + 3.
  for (int d = 0; d < plain.num_devices; d++)
    EXPECT_NEAR(static_cast<double>(sharded.devices[d].static_bytes), plain.devices[d].static_bytes * 7.0 / 16, 64);
  EXPECT_EQ(plain.stages[1].act_f_bytes, sharded.stages[1].act_f_bytes);
  PlanSpec plan;
  plan.dp = 4;
  EXPECT_GT(dp_exposed_us(find_model("gpt-7b").value, find_cluster("32xa100-80gb").value, plan), 0);
  plan.dp = 1;
  EXPECT_EQ(dp_exposed_us(find_model("gpt-7b").value, find_cluster("32xa100-80gb").value, plan), 0);
}

TEST(CostModel, SequenceParallelActivationsAreKorthikantis) {
  // [K22] Table 2, flash attention (no 5as/h term), s 2048, b 1, h 4096, t 4, per layer:
  // tensor parallel sbh(10 + 24/t) bytes, with sequence parallelism 34·sbh/t; a stage holds 4.
  const double sbh = 2048.0 * 4096;
  const Problem tp = gpt7b(32, 4, 1, false), sp = gpt7b(32, 4, 1, true);
  EXPECT_EQ(tp.stages[1].act_f_bytes, 4 * static_cast<int64_t>(sbh * (10 + 24.0 / 4)));
  EXPECT_EQ(sp.stages[1].act_f_bytes, 4 * static_cast<int64_t>(sbh * 34 / 4));
  EXPECT_EQ(sp.stages[1].act_input_bytes, static_cast<int64_t>(sbh * 2 / 4));  // the hop: 1/t per GPU
}

TEST(CostModel, LayoutsThatCannotBeAreRefused) {
  PlanSpec plan;
  plan.tp = 16;  // more than a node
  EXPECT_NE(build_problem(find_model("gpt-7b").value, find_cluster("32xa100-80gb").value, plan)
                .status.message.find("within a node"),
            std::string::npos);
  plan.tp = 2;
  plan.dp = 3;  // 32 is not a multiple of 6
  EXPECT_FALSE(build_problem(find_model("gpt-7b").value, find_cluster("32xa100-80gb").value, plan).ok());
}

// V-shape and interleaved cuts come from the layers (the issue's "cut at layer boundaries"): the
// embedding and the LM head stay whole, so a V-shape's device 0 holds both ends of the model.
TEST(CostModel, OtherPlacementsCutAtLayerBoundaries) {
  const ModelSpec m = find_model("llama2-13b").value;  // 40 layers
  Result<Problem> lin = build_problem(m, find_cluster("8xa100-40gb").value, {.num_microbatches = 16});
  ASSERT_TRUE(lin.ok()) << lin.status.message;
  const Problem& p = lin.value;
  ASSERT_EQ(p.layers.size(), 42u);  // the embedding, 40 layers, the head
  EXPECT_EQ(p.layers.front().kind, LayerKind::kEmbedding);
  EXPECT_EQ(p.layers.back().kind, LayerKind::kHead);
  EXPECT_TRUE(layers_match(p));
  double layer_sum = 0;
  for (const LayerSpec& l : p.layers) layer_sum += l.t_f_us;

  Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok()) << v.status.message;
  ASSERT_EQ(v.value.num_stages(), 16);
  int layers = 0;
  double stage_sum = 0;
  for (const StageSpec& st : v.value.stages) {
    EXPECT_GE(st.num_layers, 1);
    layers += st.num_layers;
    stage_sum += st.t_f_us;
  }
  EXPECT_EQ(layers, 42);
  EXPECT_NEAR(stage_sum, layer_sum, 1e-6 * layer_sum);
  // The last stage (on device 0) carries the LM head whole: more than its layers' share alone.
  const StageSpec& last = v.value.stages.back();
  EXPECT_GT(last.t_f_us, (last.num_layers - 1) * p.layers[1].t_f_us * 1.01);
  // Device 0 holds the embedding (first stage) and the head (last stage): the most static bytes;
  // an even split of the linear stages would have given it the same as device 1.
  EXPECT_GT(v.value.devices[0].static_bytes, v.value.devices[1].static_bytes);
  int64_t statics = 0, layer_statics = 0;
  for (const DeviceSpec& d : v.value.devices) statics += d.static_bytes;
  for (const LayerSpec& l : p.layers) layer_statics += l.static_bytes;
  EXPECT_EQ(statics, layer_statics);
  // Any number of chunks per device cuts at layers, even one that does not divide 8 stages...
  Result<Problem> i3 = rechunk(p, Placement::kInterleaved, 3);
  ASSERT_TRUE(i3.ok()) << i3.status.message;
  EXPECT_TRUE(layers_match(i3.value));
  // ... but never more stages than layers.
  Result<Problem> i6 = rechunk(p, Placement::kInterleaved, 6);
  ASSERT_FALSE(i6.ok());
  EXPECT_NE(i6.status.message.find("cannot cut 42 layers into 48 stages"), std::string::npos) << i6.status.message;
  // Back to linear from V-shape: the same layers, every stage accounted for.
  Result<Problem> back = rechunk(v.value, Placement::kLinear, 1);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(layers_match(back.value));

  // Edited stages make the layers stale: rechunk splits the stages evenly, and drops the layers.
  Problem edited = p;
  edited.stages[0].t_f_us *= 2;
  EXPECT_FALSE(layers_match(edited));
  Result<Problem> split = rechunk(edited, Placement::kVShape, 2);
  ASSERT_TRUE(split.ok());
  EXPECT_TRUE(split.value.layers.empty());
  EXPECT_DOUBLE_EQ(split.value.stages[0].t_f_us, edited.stages[0].t_f_us / 2);

  // The layers travel in the problem JSON.
  Result<Problem> read = problem_from_json(problem_to_json(p));
  ASSERT_TRUE(read.ok()) << read.status.message;
  ASSERT_EQ(read.value.layers.size(), 42u);
  EXPECT_EQ(read.value.layers.back().static_bytes, p.layers.back().static_bytes);
  EXPECT_EQ(read.value.layers.back().kind, LayerKind::kHead);
  EXPECT_TRUE(layers_match(read.value));
}

// Models from their Hugging Face config.json files (tests/data/hf: the released configs' fields).
TEST(CostModel, HuggingFaceConfigs) {
  const std::string dir = std::string(OPTPIPE_TEST_DATA) + "/hf/";
  // The Llama 3 presets are their configs.
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3.1-405b"}) {
    Result<ModelSpec> from_config = find_model(dir + name + ".json");
    ASSERT_TRUE(from_config.ok()) << from_config.status.message;
    const ModelSpec& a = from_config.value;
    const ModelSpec b = find_model(name).value;
    EXPECT_EQ(std::tie(a.num_layers, a.hidden, a.ffn, a.heads, a.kv_heads, a.seq_len, a.vocab, a.mlp, a.head_dim),
              std::tie(b.num_layers, b.hidden, b.ffn, b.heads, b.kv_heads, b.seq_len, b.vocab, b.mlp, b.head_dim))
        << name;
  }
  // Qwen2.5: its sliding window is off (use_sliding_window false); the sequence capped at 8192.
  Result<ModelSpec> qwen = find_model(dir + "qwen2.5-7b.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status.message;
  EXPECT_EQ(qwen.value.kv_heads, 4);
  EXPECT_EQ(qwen.value.seq_len, 8192);
  EXPECT_EQ(qwen.value.sliding_window, 0);
  // Gemma: head_dim 256 × 16 heads is wider than hidden 3072; the attention's widths follow it.
  Result<ModelSpec> gemma = find_model(dir + "gemma-7b.json");
  ASSERT_TRUE(gemma.ok()) << gemma.status.message;
  EXPECT_EQ(gemma.value.attention_width(), 4096);
  ModelSpec narrow = gemma.value;
  narrow.head_dim = 0;  // as if hidden / heads = 192
  const LayerCost wide = transformer_layer_cost(gemma.value, 1), usual = transformer_layer_cost(narrow, 1);
  const double h = 3072, f = 24576, s = 8192;
  // QKV (h·(q + 2kv)), output (q·h), MLP (3·h·f): by hand, and the causal attention's 2·s²·q.
  EXPECT_EQ(wide.params, static_cast<int64_t>(h * (4096 + 2 * 4096) + 4096 * h + 3 * h * f + 4 * h));
  EXPECT_DOUBLE_EQ(wide.fwd_flops - usual.fwd_flops,
                   2 * s * (h * (3 * 4096.0 - 3 * 3072.0) + (4096.0 - 3072.0) * h) + 2 * s * s * (4096.0 - 3072.0));
  // A window shorter than the sequence is refused at build time, naming it; a shorter sequence plans.
  Result<ModelSpec> mistral = find_model(dir + "mistral-7b-v0.1.json");
  ASSERT_TRUE(mistral.ok()) << mistral.status.message;
  const ClusterSpec cluster = find_cluster("8xh100").value;
  Result<Problem> refused = build_problem(mistral.value, cluster, PlanSpec{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status.message.find("sliding_window 4096"), std::string::npos) << refused.status.message;
  mistral.value.seq_len = 4096;
  EXPECT_TRUE(build_problem(mistral.value, cluster, PlanSpec{}).ok());
  EXPECT_TRUE(build_problem(find_model(dir + "mistral-7b-v0.3.json").value, cluster, PlanSpec{}).ok());
  // Mixture of experts and multi-latent attention are refused with the key named.
  for (auto [file, key] :
       {std::pair{"mixtral-8x7b.json", "num_local_experts"}, std::pair{"qwen2-moe-as-qwen2.json", "num_experts"}}) {
    Result<ModelSpec> r = find_model(dir + file);
    ASSERT_FALSE(r.ok()) << file;
    EXPECT_NE(r.status.message.find(key), std::string::npos) << r.status.message;
  }
  for (auto [text, key] : {std::pair{R"({"model_type": "llama", "kv_lora_rank": 512})", "kv_lora_rank"},
                           std::pair{R"({"model_type": "gpt2", "n_layer": 12})", "model_type \"gpt2\""},
                           std::pair{R"({"model_type": "llama", "hidden_size": 4096})", "num_hidden_layers"},
                           std::pair{R"([1, 2])", "not a JSON object"},
                           std::pair{R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 100,
                                         "intermediate_size": 10, "num_attention_heads": 3, "vocab_size": 9})",
                                     "not divisible"}}) {
    Result<ModelSpec> r = model_from_hf_config(text, "config.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status.message.find(key), std::string::npos) << r.status.message;
  }
}

// The whole iteration: the pipeline, the exposed reduction, the optimizer step (30 bytes a
// parameter at HBM bandwidth over the busiest GPU's parameters), and the throughput figures.
TEST(CostModel, IterationFigures) {
  const ModelSpec m = find_model("llama2-7b").value;
  const ClusterSpec c = find_cluster("8xh100").value;  // pp 8: 4 layers a stage, and an end's table
  const double params = 4.0 * transformer_layer_cost(m, 1).params + 32000.0 * 4096;
  const IterationFigures f = iteration_figures(m, c, PlanSpec{.num_microbatches = 32}, 32, 1e6);
  EXPECT_DOUBLE_EQ(f.optimizer_us, 30 * params / 3.35e6);
  EXPECT_EQ(f.dp_exposed_us, 0);
  EXPECT_DOUBLE_EQ(f.iteration_us, 1e6 + f.optimizer_us);
  EXPECT_DOUBLE_EQ(f.tokens_per_s_per_gpu, 32.0 * 4096 / (f.iteration_us * 1e-6) / 8);
  EXPECT_DOUBLE_EQ(f.model_tflops_per_gpu, model_flops(m, 32) / (f.iteration_us * 1e-6) / 8 / 1e12);
  // Two data-parallel ranks with the distributed optimizer: each updates half.
  const ClusterSpec c16 = find_cluster("16xh100").value;
  const IterationFigures d = iteration_figures(m, c16, PlanSpec{.num_microbatches = 32, .dp = 2}, 64, 1e6);
  EXPECT_DOUBLE_EQ(d.optimizer_us, f.optimizer_us / 2);
  EXPECT_GT(d.dp_exposed_us, 0);
}
