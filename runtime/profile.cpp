#include "profile.h"

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <thread>

#include "engine.h"

namespace optpipe::runtime {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Half the median round trip of a `numel`-float tensor between two gloo ranks (threads here).
double measure_hop_us(int64_t numel, int repetitions) {
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;
  server_opts.isServer = true;
  server_opts.waitWorkers = false;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_opts);
  c10d::TCPStoreOptions client_opts;
  client_opts.port = server->getPort();
  std::vector<double> round_trips;
  auto rank_main = [&](int rank) {
    c10::intrusive_ptr<c10d::Store> store = server;
    if (rank == 1) store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_opts);
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    c10d::ProcessGroupGloo pg(store, rank, 2, opts);
    std::vector<at::Tensor> buf{at::ones({numel})};
    for (int k = 0; k < repetitions + 2; k++) {
      const double start = monotonic_us();
      if (rank == 0) {
        pg.send(buf, 1, 2 * k)->wait();
        pg.recv(buf, 1, 2 * k + 1)->wait();
        if (k >= 2) round_trips.push_back(monotonic_us() - start);
      } else {
        pg.recv(buf, 0, 2 * k)->wait();
        pg.send(buf, 0, 2 * k + 1)->wait();
      }
    }
  };
  std::thread peer(rank_main, 1);
  rank_main(0);
  peer.join();
  return median(round_trips) / 2;
}

// Duration of copying `bytes` to a fresh buffer, the medium the runtime offloads through here.
double measure_copy_us(int64_t bytes, int repetitions) {
  at::Tensor src = at::ones({std::max<int64_t>(1, bytes / 4)});
  std::vector<double> t;
  for (int k = 0; k < repetitions + 1; k++) {
    const double start = monotonic_us();
    at::Tensor dst = src.to(at::kCPU, false, true);
    if (k > 0) t.push_back(monotonic_us() - start);
  }
  return median(t);
}

}  // namespace

Result<Problem> profile_model(const GptConfig& cfg, const ProfileSpec& spec) {
  using R = Result<Problem>;
  if (spec.num_devices < 1 || spec.num_microbatches < 1 || spec.chunks_per_device < 1 || spec.repetitions < 1)
    return R::Error(Status::Invalid("devices, microbatches, chunks per device and repetitions must be ≥ 1"));
  if ((spec.placement == Placement::kLinear && spec.chunks_per_device != 1) ||
      (spec.placement == Placement::kVShape && spec.chunks_per_device != 2))
    return R::Error(Status::Invalid(std::string("placement ") + placement_name(spec.placement) + " takes " +
                                    (spec.placement == Placement::kLinear ? "1 chunk" : "2 chunks") + " per device"));
  Problem p;
  p.num_devices = spec.num_devices;
  p.num_microbatches = spec.num_microbatches;
  p.placement = spec.placement;
  p.chunks_per_device = spec.chunks_per_device;
  const int S = p.num_stages();
  const int64_t b = cfg.microbatch_size, T = cfg.model.seq_len, h = cfg.model.hidden;
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, S);
  p.devices.assign(spec.num_devices, DeviceSpec{});
  const Batch batch = make_batch(cfg, 0, 0);
  int64_t largest_stash = 0;
  for (int s = 0; s < S; s++) {
    ChunkParams params = init_chunk(cfg, layouts[s]);
    const at::Tensor input = layouts[s].embedding ? batch.tokens : at::randn({b, T, h});
    const at::Tensor grad_output = at::randn({b, T, h}) * 1e-3;
    std::vector<double> t_f, t_r, t_b, t_w;
    StageSpec st;
    for (int k = 0; k < spec.repetitions + 1; k++) {
      at::Tensor out;
      const double t0 = monotonic_us();
      Stash stash = forward(cfg, params, input, batch, &out);
      const double t1 = monotonic_us();
      forward(cfg, params, input, batch, &out);  // the recompute runs the same forward
      const double t2 = monotonic_us();
      st.act_f_bytes = stash_bytes(stash.tensors);
      st.act_input_bytes = stash_bytes({stash.tensors[0]});
      WeightStash w;
      backward_input(cfg, &params, std::move(stash), grad_output, batch, &w);
      const double t3 = monotonic_us();
      st.act_w_bytes = -stash_bytes(w);
      backward_weight(&params, std::move(w));
      const double t4 = monotonic_us();
      if (k == 0) continue;  // warm-up
      t_f.push_back(t1 - t0);
      t_r.push_back(t2 - t1);
      t_b.push_back(t3 - t2);
      t_w.push_back(t4 - t3);
    }
    st.t_f_us = median(t_f);
    st.t_r_us = median(t_r);
    st.t_b_us = median(t_b);
    st.t_w_us = median(t_w);
    st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    largest_stash = std::max(largest_stash, st.act_f_bytes);
    p.stages.push_back(st);
    p.devices[p.device_of(s)].static_bytes += 16 * num_params(params);
  }
  p.t_comm_us = spec.num_devices > 1 ? measure_hop_us(b * T * h, std::max(10, spec.repetitions)) : 0;
  const double latency_us = measure_copy_us(4, 20);
  const double copy_us = std::max(measure_copy_us(largest_stash, std::max(5, spec.repetitions)) - latency_us, 1e-3);
  const double gb_per_s = static_cast<double>(largest_stash) / copy_us / 1e3;
  p.host_link = {gb_per_s, gb_per_s, latency_us};
  for (DeviceSpec& d : p.devices) {
    int64_t all_kept = 0;
    for (int s = 0; s < S; s++)
      if (&p.devices[p.device_of(s)] == &d) all_kept += p.stages[s].act_f_bytes * spec.num_microbatches;
    d.mem_budget_bytes = spec.mem_budget_bytes > 0 ? spec.mem_budget_bytes : d.static_bytes + all_kept;
  }
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(p));
}

}  // namespace optpipe::runtime
