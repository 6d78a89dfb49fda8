// The cost model against hand-worked numbers from the formulas' sources.
#include <gtest/gtest.h>

#include <numeric>

#include "optpipe/cost_model.h"
#include "optpipe/json_io.h"

using namespace optpipe;

TEST(CostModel, GptLayerMatchesThePapers) {
  const ModelSpec& m = find_model("gpt-7b").value;  // h = 4096, a = 32, s = 2048
  LayerCost c = transformer_layer_cost(m, 1);
  // [N21] 24·b·s·h²·(1 + s/6h) = 24·2048·4096²·(13/12)
  EXPECT_DOUBLE_EQ(c.fwd_flops, 24.0 * 2048 * 4096 * 4096 * 13 / 12);
  EXPECT_DOUBLE_EQ(c.bwd_weight_flops, 24.0 * 2048 * 4096 * 4096);  // the matmuls only
  // [K22] flash attention: 34·s·b·h bytes; [Q23] W keeps 32·s·b·h of them.
  EXPECT_EQ(c.act_bytes, 34ll * 2048 * 4096);
  EXPECT_EQ(c.act_after_b_bytes, 32ll * 2048 * 4096);
  EXPECT_EQ(c.params, 12ll * 4096 * 4096 + 4 * 4096);

  ModelSpec no_flash = m;
  no_flash.flash_attention = false;
  // [K22] sbh(34 + 5as/h) = 2048·4096·(34 + 80)
  EXPECT_EQ(transformer_layer_cost(no_flash, 1).act_bytes, 2048ll * 4096 * 114);
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
    for (Partition part : {Partition::kUniform, Partition::kBalanced}) {
      std::vector<int> n = partition_layers(m, chunks, part, 1);
      ASSERT_EQ(static_cast<int>(n.size()), chunks);
      EXPECT_EQ(std::accumulate(n.begin(), n.end(), 0), 80);
    }
  }
  EXPECT_EQ(partition_layers(m, 16, Partition::kUniform, 1), std::vector<int>(16, 5));
  // Balanced: a heavy LM head (a 400k vocabulary costs ~7.5 layers, more than any 4–5 layer
  // chunk) gets a chunk of its own.
  ModelSpec big_vocab = find_model("gpt-7b").value;
  big_vocab.vocab = 400000;
  std::vector<int> b = partition_layers(big_vocab, 8, Partition::kBalanced, 1);
  EXPECT_EQ(b.back(), 0);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 32);
}

TEST(CostModel, ProblemFromModelAndCluster) {
  const ModelSpec& m = find_model("gpt-7b").value;
  Result<ClusterSpec> c = find_cluster("8xh100");
  ASSERT_TRUE(c.ok()) << c.status.message;
  PlanSpec plan;
  plan.partition = Partition::kUniform;
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
  // Hop: 10 µs + 2·s·h bytes at 50 GB/s.
  EXPECT_NEAR(p.value.t_comm_us, 10 + 2.0 * 2048 * 4096 / 50e3, 1e-9);
  EXPECT_EQ(p.value.devices[5].mem_budget_bytes, 60ll << 30);
  EXPECT_GT(p.value.stages[7].t_f_us, p.value.stages[3].t_f_us);  // the LM head
}

TEST(CostModel, ClusterNamesAreChecked) {
  EXPECT_TRUE(find_cluster("16xh200").ok());
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
