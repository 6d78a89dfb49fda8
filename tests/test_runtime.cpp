// The runtime's model: explicit forward and split backward against autograd, stash accounting,
// and the rank-report format. Multi-process runs are in test_runtime_cli.sh.
#include <gtest/gtest.h>

#include <map>

#include "device.h"
#include "gpt.h"
#include "messages.h"
#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "records.h"

using namespace optpipe;
using namespace optpipe::runtime;

namespace {

GptConfig tiny(int num_microbatches, int layers = 4) {
  ModelSpec m = find_model("gpt-tiny").value;
  m.num_layers = layers;
  m.hidden = 32;
  m.ffn = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.seq_len = 8;
  m.vocab = 16;
  Result<GptConfig> c = gpt_config(m, 2, num_microbatches, 7);
  EXPECT_TRUE(c.ok()) << c.status.message;
  return c.value;
}

double rel_error(const at::Tensor& a, const at::Tensor& ref) {
  return (a - ref).abs().max().item<double>() / std::max(ref.abs().max().item<double>(), 1e-30);
}

// Runs every microbatch through all chunks with the split backward: F for all, then B and W
// in reverse chunk order.
double pipelined_gradients(const GptConfig& cfg, std::vector<ChunkParams>* chunks) {
  double loss = 0;
  const int S = static_cast<int>(chunks->size());
  for (int i = 0; i < cfg.num_microbatches; i++) {
    const Batch batch = make_batch(cfg, 0, i);
    std::vector<Stash> stashes;
    at::Tensor x = batch.tokens;
    for (int s = 0; s < S; s++) {
      at::Tensor out;
      stashes.push_back(forward(cfg, (*chunks)[s], x, batch, &out));
      x = out;
    }
    loss += x.item<double>();
    at::Tensor dy;
    for (int s = S - 1; s >= 0; s--) {
      WeightStash w;
      dy = backward_input(cfg, &(*chunks)[s], std::move(stashes[s]), dy, batch, &w);
      backward_weight(&(*chunks)[s], std::move(w));
    }
  }
  return loss;
}

}  // namespace

TEST(RuntimeModel, SplitBackwardMatchesAutograd) {
  for (int S : {1, 2, 3, 6}) {
    const GptConfig cfg = tiny(3);
    std::vector<ChunkParams> chunks;
    for (const ChunkLayout& l : chunk_layouts(cfg, S)) chunks.push_back(init_chunk(cfg, l));
    const ReferenceResult ref = reference_gradients(cfg, chunks, 0);
    const double loss = pipelined_gradients(cfg, &chunks);
    EXPECT_NEAR(loss, ref.loss, 1e-5 * ref.loss) << "S=" << S;
    for (int s = 0; s < S; s++)
      for (size_t k = 0; k < chunks[s].grads.size(); k++) {
        EXPECT_GT(ref.grads[s][k].abs().max().item<double>(), 0) << chunks[s].names[k];
        EXPECT_LT(rel_error(chunks[s].grads[k], ref.grads[s][k]), 1e-5) << "S=" << S << " " << chunks[s].names[k];
      }
  }
}

TEST(RuntimeModel, WrongWeightGradientIsCaught) {
  // The comparison can fail: dropping one W leaves those gradients at zero.
  const GptConfig cfg = tiny(1, 2);
  std::vector<ChunkParams> chunks;
  for (const ChunkLayout& l : chunk_layouts(cfg, 2)) chunks.push_back(init_chunk(cfg, l));
  const ReferenceResult ref = reference_gradients(cfg, chunks, 0);
  const Batch batch = make_batch(cfg, 0, 0);
  at::Tensor out0, loss;
  Stash s0 = forward(cfg, chunks[0], batch.tokens, batch, &out0);
  Stash s1 = forward(cfg, chunks[1], out0, batch, &loss);
  WeightStash w1, w0;
  at::Tensor dy = backward_input(cfg, &chunks[1], std::move(s1), at::Tensor(), batch, &w1);
  backward_input(cfg, &chunks[0], std::move(s0), dy, batch, &w0);
  backward_weight(&chunks[0], std::move(w0));  // chunk 1's W skipped
  double worst = 0;
  for (size_t k = 0; k < chunks[1].grads.size(); k++)
    worst = std::max(worst, rel_error(chunks[1].grads[k], ref.grads[1][k]));
  EXPECT_GT(worst, 0.5);
}

TEST(RuntimeModel, StashBytesAndRecompute) {
  const GptConfig cfg = tiny(1);
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, 2);
  ChunkParams c1 = init_chunk(cfg, layouts[1]);
  const Batch batch = make_batch(cfg, 0, 0);
  const at::Tensor x = at::randn({2, 8, 32});
  at::Tensor out;
  Stash full = forward(cfg, c1, x, batch, &out);
  EXPECT_EQ(stash_bytes({full.tensors[0]}), 2 * 8 * 32 * 4);
  EXPECT_GT(stash_bytes(full.tensors), 10 * stash_bytes({full.tensors[0]}));
  WeightStash w;
  ChunkParams again = init_chunk(cfg, layouts[1]);
  backward_input(cfg, &again, std::move(full), at::Tensor(), batch, &w);
  EXPECT_GT(stash_bytes(w), 0);
  // Recompute: a forward from the kept input rebuilds a stash that gives the same gradients.
  Stash rebuilt = forward(cfg, c1, x, batch, &out);
  WeightStash w2;
  backward_input(cfg, &c1, std::move(rebuilt), at::Tensor(), batch, &w2);
  backward_weight(&c1, std::move(w2));
  backward_weight(&again, std::move(w));
  for (size_t k = 0; k < c1.grads.size(); k++) EXPECT_TRUE(at::equal(c1.grads[k], again.grads[k])) << c1.names[k];
}

TEST(RuntimeModel, SameParametersForEveryCut) {
  const GptConfig cfg = tiny(1, 4);
  const std::vector<ChunkLayout> two = chunk_layouts(cfg, 2), four = chunk_layouts(cfg, 4);
  ChunkParams a = init_chunk(cfg, two[1]);
  ChunkParams b = init_chunk(cfg, four[3]);
  ASSERT_EQ(a.names.back(), b.names.back());
  EXPECT_TRUE(at::equal(a.values.back(), b.values.back()));
}

TEST(RuntimeModel, TrainingLowersTheLoss) {
  const GptConfig cfg = tiny(4, 2);
  std::vector<ChunkParams> chunks;
  for (const ChunkLayout& l : chunk_layouts(cfg, 2)) chunks.push_back(init_chunk(cfg, l));
  std::vector<AdamState> adam(2);
  double first = 0, last = 0;
  for (int it = 0; it < 30; it++) {
    for (ChunkParams& c : chunks) zero_grads(&c);
    const double loss = pipelined_gradients(cfg, &chunks);
    if (it == 0) first = loss;
    last = loss;
    for (int s = 0; s < 2; s++) adam_step(&chunks[s], &adam[s], 3e-3);
  }
  EXPECT_LT(last, 0.8 * first);
}

TEST(RuntimeModel, RefusesModelsItCannotBuild) {
  EXPECT_FALSE(gpt_config(find_model("llama2-7b").value, 1, 1, 0).ok());  // SwiGLU, not GPT blocks
  ModelSpec m = find_model("gpt-tiny").value;
  m.heads = m.kv_heads = 3;  // 128 not divisible by 3
  EXPECT_FALSE(gpt_config(m, 1, 1, 0).ok());
  EXPECT_FALSE(gpt_config(find_model("gpt-tiny").value, 0, 1, 0).ok());
}

TEST(RuntimeRecords, ReportRoundTrips) {
  RankReport r;
  r.rank = 1;
  IterationRecord it;
  it.start_us = 5;
  it.ops.push_back({{OpKind::kF, 1, 2}, 10, 20});
  it.ops.push_back({{OpKind::kReload, 1, 2}, 21, 22});
  it.memory.push_back({10, 0});
  it.memory.push_back({20, 4096});
  it.peak_activation_bytes = 4096;
  it.allocator_peak_bytes = 3 << 20;
  it.allocator_reserved_bytes = 4 << 20;
  it.loss = 2.5;
  r.iterations.push_back(it);
  r.device = "cuda:1 (a GPU)";
  r.hops = "nccl";
  r.pinned_bytes = 123;
  r.checked = true;
  r.check.max_grad_rel_error = 3e-7;
  r.check.worst_param = "layer0.w_1";
  Result<RankReport> back = rank_report_from_json(rank_report_to_json(r));
  ASSERT_TRUE(back.ok()) << back.status.message;
  EXPECT_EQ(back.value.rank, 1);
  ASSERT_EQ(back.value.iterations.size(), 1u);
  EXPECT_EQ(back.value.iterations[0].ops[1].op, (Op{OpKind::kReload, 1, 2}));
  EXPECT_EQ(back.value.iterations[0].peak_activation_bytes, 4096);
  EXPECT_EQ(back.value.iterations[0].allocator_peak_bytes, 3 << 20);
  EXPECT_EQ(back.value.iterations[0].allocator_reserved_bytes, 4 << 20);
  EXPECT_EQ(back.value.device, "cuda:1 (a GPU)");
  EXPECT_EQ(back.value.hops, "nccl");
  EXPECT_EQ(back.value.pinned_bytes, 123);
  EXPECT_EQ(back.value.check.worst_param, "layer0.w_1");
  EXPECT_FALSE(rank_report_from_json("{\"rank\": 1}").ok());
}

// What messages.h promises the GPU engine, for every family on stages of uneven cost: both ends
// of a pair list the same messages in the same order, and a host that posts receives at once
// and sends once their op is enqueued has posted every receive before the op that needs it.
TEST(RuntimeMessages, BothEndsAgreeAndTheHostNeverWaitsForItself) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  u.t_comm_us = 50;
  Problem base = make_uniform_problem(u);
  for (size_t s = 0; s < base.stages.size(); s++) base.stages[s].t_f_us *= 1 + 0.3 * static_cast<double>(s % 3);
  int families_checked = 0;
  for (const Family& f : families()) {
    Result<FamilySchedule> fs = build_family(f, base);
    if (!fs.ok()) continue;
    const Problem& p = fs.value.problem;
    const Schedule& sched = fs.value.schedule;
    std::vector<std::map<int, std::vector<Message>>> order;
    for (int d = 0; d < p.num_devices; d++) order.push_back(message_order(p, sched, d));
    int messages = 0;
    for (int d = 0; d < p.num_devices; d++) {
      for (const auto& [peer, msgs] : order[d]) {
        const std::vector<Message>& other = order[peer].at(d);
        ASSERT_EQ(msgs.size(), other.size()) << f.name << " device " << d << " peer " << peer;
        for (size_t k = 0; k < msgs.size(); k++) {
          EXPECT_EQ(msgs[k].tag, other[k].tag) << f.name << " device " << d << " peer " << peer << " #" << k;
          EXPECT_NE(msgs[k].send, other[k].send) << f.name;
        }
        messages += static_cast<int>(msgs.size());
      }
      // The host walks the device's compute ops; a send may go once its op is enqueued.
      std::vector<size_t> position(num_op_ids(p), 0);
      const std::vector<Op>& ops = sched.devices[d].compute;
      for (size_t k = 0; k < ops.size(); k++) position[op_id(p, ops[k])] = k;
      for (const auto& [peer, msgs] : order[d])
        for (size_t k = 0; k < msgs.size(); k++) {
          if (msgs[k].send) continue;
          // Every send ahead of this receive must have its op before the op needing the receive.
          for (size_t j = 0; j < k; j++) {
            if (msgs[j].send) {
              EXPECT_LT(position[op_id(p, msgs[j].local)], position[op_id(p, msgs[k].local)])
                  << f.name << " device " << d << ": " << op_name(msgs[k].local) << " needs a receive posted after "
                  << op_name(msgs[j].local) << "'s send";
            }
          }
        }
    }
    EXPECT_GT(messages, 0) << f.name;
    families_checked++;
  }
  EXPECT_GE(families_checked, 10);
}

// Without a GPU (here, in CI) every device choice but cuda lands on the CPU, and cuda says why not.
TEST(RuntimeDevice, ChoosesTheCpuWithoutAGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  at::Device dev(at::kCUDA, 0);
  Status st = rank_device(DeviceChoice::kAuto, 3, &dev);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_TRUE(dev.is_cpu());
  dev = at::Device(at::kCUDA, 0);
  ASSERT_TRUE(rank_device(DeviceChoice::kCpu, 0, &dev).ok());
  EXPECT_TRUE(dev.is_cpu());
  Status cuda = rank_device(DeviceChoice::kCuda, 0, &dev);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.message.find(cuda_built() ? "no GPU is visible" : "CPU-only"), std::string::npos) << cuda.message;
}
