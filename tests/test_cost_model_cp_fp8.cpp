// The cost model's context parallelism, FP8 and tensor-parallel overlap against the formulas in
// docs/cost-model.md, worked by hand on Llama 3 8B (h 4096, f 14336, 32 heads, 8 kv heads of 128).
#include <gtest/gtest.h>

#include <algorithm>

#include "optpipe/cost_model.h"

using namespace optpipe;

namespace {

ModelSpec llama3_8b() { return find_model("llama3-8b").value; }

Problem build(const std::string& cluster, PlanSpec plan) {
  Result<Problem> p = build_problem(llama3_8b(), find_cluster(cluster).value, plan);
  EXPECT_TRUE(p.ok()) << p.status.message;
  return p.value;
}

// Layer 5 of the model: a middle layer (item 0 is the embedding).
const LayerSpec& middle(const Problem& p) { return p.layers[6]; }

}  // namespace

TEST(ContextParallel, SplitsTheSequenceAndReducesOverDataAndContextRanks) {
  // 8 GPUs of one node: 4 stages, alone or with 2 context-parallel ranks each (16 GPUs, 2 nodes).
  const Problem one = build("4xh100", {.num_microbatches = 8});
  const Problem two = build("8xh100", {.num_microbatches = 8, .cp = 2});
  ASSERT_EQ(one.num_devices, 4);
  ASSERT_EQ(two.num_devices, 4);
  const LayerCost c = transformer_layer_cost(llama3_8b(), 1);
  const double flops_per_us = 989 * 1e6 * 0.45;
  // Every FLOP of a layer halves (the causal attention too, with Megatron's load-balanced chunks);
  // what is kept halves; the parameters are whole on each GPU.
  EXPECT_NEAR(middle(two).t_w_us, c.bwd_weight_flops / 2 / flops_per_us, 1e-6);
  EXPECT_EQ(middle(two).act_f_bytes, c.act_bytes / 2);
  const Problem two_whole_optimizer = build("8xh100", {.num_microbatches = 8, .distributed_optimizer = false, .cp = 2});
  EXPECT_EQ(middle(two_whole_optimizer).static_bytes, middle(one).static_bytes);
  EXPECT_EQ(middle(two).act_input_bytes, middle(one).act_input_bytes / 2);  // the hop: s/cp tokens
  // Ring attention on NVLink: a step's K/V block (4096 tokens × 2 × 1024 values × 2 bytes = 16 MiB)
  // takes 10 + 16.8e6 / 360e3 µs, less than the step's attention (half the layer's): hidden.
  const double step_us = 10 + 4096.0 * 2 * 1024 * 2 / 360e3;
  const double f_attention_us = c.fwd_attention_flops / 2 / flops_per_us;
  ASSERT_LT(step_us, f_attention_us / 2);
  EXPECT_NEAR(middle(two).t_f_us, c.fwd_flops / 2 / flops_per_us, 1e-6);
  // Across nodes (tp 8 · cp 2 > 8 GPUs a node) at a slow 1 GB/s the steps show: (cp − 1) · (step − attention / cp).
  ClusterSpec slow = find_cluster("32xh100").value;
  slow.p2p_gb_per_s = 1;
  Result<Problem> across = build_problem(llama3_8b(), slow, {.num_microbatches = 8, .tp = 8, .cp = 2});
  ASSERT_TRUE(across.ok()) << across.status.message;
  const double slow_step_us = 10 + 4096.0 * 2 * 128 * 2 / 1e3;  // tp 8: one kv head of 128 values a GPU
  const double tp_us = 4 * 7.0 / 8 * (4096.0 * 4096 * 2) / 360e3;
  EXPECT_NEAR(middle(across.value).t_f_us,
              c.fwd_flops / 16 / flops_per_us + tp_us + (slow_step_us - c.fwd_attention_flops / 16 / flops_per_us / 2),
              1e-6);
  // Gradients reduce over dp · cp ranks, and the distributed optimizer shards over them too.
  const ModelSpec m = llama3_8b();
  EXPECT_EQ(dp_exposed_us(m, find_cluster("4xh100").value, {}), 0);
  EXPECT_GT(dp_exposed_us(m, find_cluster("8xh100").value, {.cp = 2}), 0);
  EXPECT_NEAR(optimizer_step_us(m, find_cluster("8xh100").value, {.cp = 2}),
              optimizer_step_us(m, find_cluster("4xh100").value, {}) / 2, 1e-6);
  EXPECT_LT(middle(two).static_bytes, middle(two_whole_optimizer).static_bytes);
}

TEST(ContextParallel, LayoutsItCannotTakeAreRefused) {
  const ModelSpec m = llama3_8b();
  // 8190 tokens do not cut into 2 × 2 equal chunks; 8 GPUs are not a multiple of cp 16.
  ModelSpec odd = m;
  odd.seq_len = 8190;
  EXPECT_NE(build_problem(odd, find_cluster("8xh100").value, {.cp = 2}).status.message.find("2 × cp = 4"),
            std::string::npos);
  EXPECT_NE(build_problem(m, find_cluster("8xh100").value, {.cp = 16}).status.message.find("tp × cp × dp = 16"),
            std::string::npos);
  EXPECT_FALSE(build_problem(m, find_cluster("8xh100").value, {.cp = 0}).ok());
}

TEST(Precision, Fp8RunsTheLayersGemmsAtTheFp8Peak) {
  const Problem bf16 = build("4xh100", {.num_microbatches = 8});
  const Problem fp8 = build("4xh100", {.num_microbatches = 8, .precision = Precision::kFp8});
  const LayerCost c = transformer_layer_cost(llama3_8b(), 1);
  const double bf16_per_us = 989 * 1e6 * 0.45, fp8_per_us = 1979 * 1e6 * 0.45;
  // W is all GEMMs; F's attention stays in BF16.
  EXPECT_NEAR(middle(fp8).t_w_us, c.bwd_weight_flops / fp8_per_us, 1e-6);
  EXPECT_NEAR(middle(fp8).t_f_us,
              (c.fwd_flops - c.fwd_attention_flops) / fp8_per_us + c.fwd_attention_flops / bf16_per_us, 1e-6);
  EXPECT_NEAR(middle(fp8).t_b_us,
              (c.bwd_input_flops - c.bwd_attention_flops) / fp8_per_us + c.bwd_attention_flops / bf16_per_us, 1e-6);
  // The GEMM inputs W needs are kept in one byte: the two norms' outputs and the second MLP input.
  const int64_t saved = 8192ll * (2 * 4096 + 14336);
  EXPECT_EQ(middle(fp8).act_f_bytes, middle(bf16).act_f_bytes - saved);
  EXPECT_EQ(middle(fp8).act_w_bytes, middle(bf16).act_w_bytes + saved);
  // Each GEMM weight's FP8 copy and transpose: 2 bytes a parameter more beside the BF16 weight;
  // none with the distributed optimizer, which holds the weights in FP8 alone (--fp8-param-gather).
  EXPECT_EQ(middle(fp8).static_bytes, middle(bf16).static_bytes + 2 * c.params);
  const Problem bf16_dp2 = build("8xh100", {.num_microbatches = 8, .dp = 2});
  const Problem fp8_dp2 = build("8xh100", {.num_microbatches = 8, .dp = 2, .precision = Precision::kFp8});
  EXPECT_EQ(middle(fp8_dp2).static_bytes, middle(bf16_dp2).static_bytes);
  // The LM head is BF16 in either.
  EXPECT_EQ(fp8.layers.back().t_f_us, bf16.layers.back().t_f_us);
  // A100 has no FP8 tensor cores.
  Result<Problem> a100 = build_problem(llama3_8b(), find_cluster("4xa100-80gb").value, {.precision = Precision::kFp8});
  EXPECT_NE(a100.status.message.find("no FP8 tensor cores"), std::string::npos) << a100.status.message;
  EXPECT_EQ(parse_precision("fp8").value, Precision::kFp8);
  EXPECT_NE(parse_precision("fp4").status.message.find("expected bf16 or fp8"), std::string::npos);
}

TEST(TensorParallel, OverlapHidesTheCollectivesUnderTheGemms) {
  const Problem plain = build("16xh100", {.num_microbatches = 8, .tp = 4});
  const Problem overlapped = build("16xh100", {.num_microbatches = 8, .tp = 4, .tp_comm_overlap = true});
  const LayerCost c = transformer_layer_cost(llama3_8b(), 1);
  const double per_us = 989 * 1e6 * 0.45;
  const double tp_us = 4 * 3.0 / 4 * (8192.0 * 4096 * 2) / 360e3;
  const double f_gemm_us = (c.fwd_flops - c.fwd_attention_flops) / 4 / per_us;
  EXPECT_NEAR(middle(plain).t_f_us, c.fwd_flops / 4 / per_us + tp_us, 1e-6);
  EXPECT_NEAR(middle(overlapped).t_f_us, c.fwd_flops / 4 / per_us + std::max(0.0, tp_us - f_gemm_us), 1e-6);
  EXPECT_LT(middle(overlapped).t_f_us, middle(plain).t_f_us);
}
