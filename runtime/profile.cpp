#include "profile.h"

#include <algorithm>

#include "engine.h"

namespace optpipe::runtime {
namespace {

// Half the median round trip of a `numel`-float tensor between ranks 0 and 1 over gloo; on a
// GPU through host memory both ways, as the hops go when ranks share a GPU (NCCL's are faster,
// so a prediction for them from this figure is pessimistic).
double measure_hop_us(const Group& g, int64_t numel, int repetitions) {
  std::vector<double> round_trips;
  const at::Tensor on_device = at::ones({numel}, at::TensorOptions().device(g.device));
  const std::string what =
      "rank " + std::to_string(g.rank) + ": profiling the hop to rank " + std::to_string(1 - g.rank);
  const int peer = 1 - g.rank;
  for (int k = 0; k < repetitions + 2; k++) {
    const double start = monotonic_us();
    std::vector<at::Tensor> buf{on_device.to(at::kCPU)};
    if (g.rank == 0) {
      wait_work(g.pg->send(buf, peer, 2 * k), g.timeout_s, what);
      wait_work(g.pg->recv(buf, peer, 2 * k + 1), g.timeout_s, what);
      buf[0].to(g.device);
      synchronize(g.device);
      if (k >= 2) round_trips.push_back(monotonic_us() - start);
    } else {
      wait_work(g.pg->recv(buf, peer, 2 * k), g.timeout_s, what);
      buf[0] = buf[0].to(g.device).to(at::kCPU);
      wait_work(g.pg->send(buf, peer, 2 * k + 1), g.timeout_s, what);
    }
  }
  return g.rank == 0 ? median(round_trips) / 2 : 0;
}

// Duration of copying `bytes` from `device` to a host buffer of the kind the runtime offloads
// into (pinned, for a GPU).
double measure_copy_us(int64_t bytes, int repetitions, const at::Device& device) {
  at::Tensor src = at::ones({std::max<int64_t>(1, bytes / 4)}, at::TensorOptions().device(device));
  at::Tensor dst = device.is_cpu() ? at::Tensor() : host_buffer(src, device);  // the CPU copies into fresh memory
  std::vector<double> t;
  for (int k = 0; k < repetitions + 1; k++) {
    synchronize(device);
    const double start = monotonic_us();
    if (device.is_cpu()) {
      dst = src.to(at::kCPU, false, true);  // as the CPU engine's offloads do
    } else {
      dst.copy_(src);
      synchronize(device);
    }
    if (k > 0) t.push_back(monotonic_us() - start);
  }
  return median(t);
}

}  // namespace

Status check_profile_spec(const ProfileSpec& spec) {
  if (spec.num_devices < 1 || spec.num_microbatches < 1 || spec.chunks_per_device < 1 || spec.repetitions < 1)
    return Status::Invalid("devices, microbatches, chunks per device and repetitions must be ≥ 1");
  if ((spec.placement == Placement::kLinear && spec.chunks_per_device != 1) ||
      (spec.placement == Placement::kVShape && spec.chunks_per_device != 2))
    return Status::Invalid(std::string("placement ") + placement_name(spec.placement) + " takes " +
                           (spec.placement == Placement::kLinear ? "1 chunk" : "2 chunks") + " per device");
  return Status::Ok();
}

namespace {

// profile_rank(), throwing when a peer fails.
Result<Problem> measure_share(const GptConfig& cfg, const ProfileSpec& spec, const Group& group) {
  using R = Result<Problem>;
  if (Status st = check_profile_spec(spec); !st.ok()) return R::Error(st);
  if (group.world_size != spec.num_devices)
    return R::Error(Status::Invalid("world size " + std::to_string(group.world_size) + " but " +
                                    std::to_string(spec.num_devices) + " devices to profile"));
  c10d::ProcessGroupGloo& pg = *group.pg;
  const int rank = group.rank;
  const at::Device device = group.device;
  const double timeout_s = group.timeout_s;
  const std::string me = "rank " + std::to_string(rank);

  Problem p;
  p.num_devices = spec.num_devices;
  p.num_microbatches = spec.num_microbatches;
  p.placement = spec.placement;
  p.chunks_per_device = spec.chunks_per_device;
  const int S = p.num_stages();
  const int64_t b = cfg.microbatch_size, T = cfg.model.seq_len, h = cfg.model.hidden;
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, S);
  p.stages.assign(S, StageSpec{});
  p.devices.assign(spec.num_devices, DeviceSpec{0, 1, 0});  // budgets: merge_profiles sets them
  const Batch batch = to_device(make_batch(cfg, 0, 0), device);
  // Every rank times its stages at the same time, as they will run.
  wait_work(pg.barrier(), timeout_s, me + ": profiling start");
  // Several microbatches in flight and this rank's chunks in turn, each pass over all of them, so
  // that caches hold what they hold in a run (timing one microbatch of one chunk over and over
  // measured ~10% fast).
  struct Chunk {
    int stage;
    ChunkParams params;
    std::vector<at::Tensor> inputs;
    std::vector<double> t_f, t_r, t_b, t_w;
  };
  std::vector<Chunk> chunks;
  const int in_flight = std::min(spec.num_microbatches, 4);
  for (int s = 0; s < S; s++) {
    if (p.device_of(s) != rank) continue;
    Chunk c{s, init_chunk(cfg, layouts[s]), {}, {}, {}, {}, {}};
    to_device(&c.params, device);
    for (int i = 0; i < in_flight; i++)
      c.inputs.push_back(layouts[s].embedding ? batch.tokens : at::randn({b, T, h}).to(device));
    chunks.push_back(std::move(c));
  }
  const at::Tensor grad_output = (at::randn({b, T, h}) * 1e-3).to(device);
  // On a GPU the host only queues work: each op is timed from an idle device to its end.
  auto timed = [&device](bool record, std::vector<double>* into, auto&& fn) {
    synchronize(device);
    const double t0 = monotonic_us();
    fn();
    synchronize(device);
    if (record) into->push_back(monotonic_us() - t0);
  };
  for (int k = 0; k < spec.repetitions + 1; k++) {
    const bool record = k > 0;  // the first round warms up
    for (Chunk& c : chunks) {
      StageSpec& st = p.stages[c.stage];
      std::vector<Stash> stashes(in_flight);
      std::vector<WeightStash> w(in_flight);
      at::Tensor out;
      for (int i = 0; i < in_flight; i++)
        timed(record, &c.t_f, [&] { stashes[i] = forward(cfg, c.params, c.inputs[i], batch, &out); });
      for (int i = 0; i < in_flight; i++)  // the recompute runs the same forward
        timed(record, &c.t_r, [&] { forward(cfg, c.params, c.inputs[i], batch, &out); });
      st.act_f_bytes = stash_bytes(stashes[0].tensors);
      st.act_input_bytes = stash_bytes({stashes[0].tensors[0]});
      for (int i = 0; i < in_flight; i++)
        timed(record, &c.t_b,
              [&] { backward_input(cfg, &c.params, std::move(stashes[i]), grad_output, batch, &w[i]); });
      st.act_w_bytes = -stash_bytes(w[0]);
      for (int i = 0; i < in_flight; i++) timed(record, &c.t_w, [&] { backward_weight(&c.params, std::move(w[i])); });
    }
  }
  int64_t largest_stash = 0;
  for (Chunk& c : chunks) {
    StageSpec& st = p.stages[c.stage];
    st.t_f_us = median(c.t_f);
    st.t_r_us = median(c.t_r);
    st.t_b_us = median(c.t_b);
    st.t_w_us = median(c.t_w);
    st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    largest_stash = std::max(largest_stash, st.act_f_bytes);
    p.devices[rank].static_bytes += 16 * num_params(c.params);
  }
  wait_work(pg.barrier(), timeout_s, me + ": profiling the hop");
  if (rank < 2 && spec.num_devices > 1) p.t_comm_us = measure_hop_us(group, b * T * h, std::max(10, spec.repetitions));
  const double latency_us = measure_copy_us(4, 20, device);
  const double copy_us =
      std::max(measure_copy_us(largest_stash, std::max(5, spec.repetitions), device) - latency_us, 1e-3);
  const double gb_per_s = static_cast<double>(std::max<int64_t>(largest_stash, 1)) / copy_us / 1e3;
  p.host_link = {gb_per_s, gb_per_s, latency_us};
  wait_work(pg.barrier(), timeout_s, me + ": profiling end");
  return R::Of(std::move(p));
}

}  // namespace

Result<Problem> profile_rank(const GptConfig& cfg, const ProfileSpec& spec, const Group& group) {
  try {
    return measure_share(cfg, spec, group);
  } catch (const std::exception& e) {
    return Result<Problem>::Error(Status::Invalid(e.what()));
  }
}

Result<Problem> merge_profiles(const ProfileSpec& spec, const std::vector<Problem>& shares) {
  using R = Result<Problem>;
  OPTPIPE_CHECK(static_cast<int>(shares.size()) == spec.num_devices, "one share per rank");
  Problem p = shares[0];
  HostLinkSpec slowest = shares[0].host_link;
  for (int d = 0; d < spec.num_devices; d++) {
    for (int s = 0; s < p.num_stages(); s++)
      if (p.device_of(s) == d) p.stages[s] = shares[d].stages[s];
    p.devices[d] = shares[d].devices[d];
    slowest.d2h_gb_per_s = std::min(slowest.d2h_gb_per_s, shares[d].host_link.d2h_gb_per_s);
    slowest.h2d_gb_per_s = std::min(slowest.h2d_gb_per_s, shares[d].host_link.h2d_gb_per_s);
    slowest.latency_us = std::max(slowest.latency_us, shares[d].host_link.latency_us);
  }
  p.host_link = slowest;
  for (int d = 0; d < spec.num_devices; d++)
    p.devices[d].mem_budget_bytes =
        spec.mem_budget_bytes > 0 ? spec.mem_budget_bytes : p.devices[d].static_bytes + p.every_activation_bytes(d);
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(p));
}

}  // namespace optpipe::runtime
