// A pipeline rank on a GPU (engine_cuda.h). The host thread only enqueues work: the compute ops
// on one compute stream in schedule order, offloads on a device-to-host stream into pinned host
// buffers from a pool, reloads on a host-to-device stream. Every gate is a CUDA event the waiting
// stream blocks on — a B on its reload, a WAIT on its offload, a reload on its anchor's start, on
// its offload and on what its `after` ops free — so the host never polls. Op times come from
// timing events, read once the iteration has run; memory from the caching allocator's peaks,
// beside the activation tally the CPU engine keeps (the simulator's accounting, at the events'
// times). The budget is held by the schedule's own gates: there is no host-side memory gate, so
// a schedule that fits only at its predicted timing may pass it when transfers run late.
//
// Hops: hops_cuda.h (NCCL, or gloo through host memory).
#include "engine_cuda.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "check.h"
#include "hops_cuda.h"
#include "messages.h"

namespace optpipe::runtime {

namespace {

using at::cuda::CUDAEvent;
using c10::cuda::CUDAStream;

// Timing events of one iteration (ATen's default event does not time).
class Events {
 public:
  CUDAEvent* record(const CUDAStream& stream) {
    events_.push_back(std::make_unique<CUDAEvent>(cudaEventDefault));
    events_.back()->record(stream);
    return events_.back().get();
  }

 private:
  std::vector<std::unique_ptr<CUDAEvent>> events_;
};

// Pinned host buffers for offloads, kept across iterations: a buffer goes back to the pool when
// its iteration has run, so from the second iteration on no offload allocates host memory.
class PinnedPool {
 public:
  at::Tensor take(const at::Tensor& like) {
    const int64_t bytes = like.numel() * static_cast<int64_t>(like.element_size());
    at::Tensor buf;
    if (auto it = free_.find(bytes); it != free_.end()) {
      buf = std::move(it->second);
      free_.erase(it);
    } else {
      buf = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      total_bytes_ += bytes;
    }
    taken_.push_back(buf);
    return buf.view(like.scalar_type()).view(like.sizes());
  }
  void release_all() {
    for (at::Tensor& b : taken_) free_.emplace(b.numel(), std::move(b));
    taken_.clear();
  }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  std::multimap<int64_t, at::Tensor> free_;
  std::vector<at::Tensor> taken_;
  int64_t total_bytes_ = 0;
};

// What one iteration enqueues and reads back once it has run.
struct Pass {
  explicit Pass(size_t num_slots, size_t num_ops)
      : stash(num_slots),
        w_stash(num_slots),
        local_act(num_slots),
        local_grad(num_slots),
        offload_end(num_slots, nullptr),
        reload_end(num_slots, nullptr),
        op_start(num_ops, nullptr),
        op_end(num_ops, nullptr) {}

  Events events;
  std::vector<Batch> batches;
  std::vector<Stash> stash;  // by slot: F's stash, its host copy once offloaded
  std::vector<WeightStash> w_stash;
  std::vector<at::Tensor> local_act, local_grad;    // from a chunk on this rank
  std::vector<CUDAEvent*> offload_end, reload_end;  // by slot
  std::vector<CUDAEvent*> op_start, op_end;         // by op id, compute ops
  struct Timed {
    Op op;
    CUDAEvent *start, *end;
  };
  std::vector<Timed> timed;
  std::vector<std::pair<CUDAEvent*, int64_t>> tally;  // live activation bytes added at each event
  at::Tensor loss;                                    // on the device, summed over the head's F
  size_t next_offload = 0, next_reload = 0;
};

class CudaRankLoop {
 public:
  CudaRankLoop(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
               const EngineOptions& options);
  Status run_iteration(int it, RankReport* report);

 private:
  size_t slot(int st, int i) const { return static_cast<size_t>(st) * M_ + i; }
  void run_compute_op(const Op& op, Pass* pass);
  at::Tensor input_of(const Op& op, const std::string& what, Pass* pass);
  at::Tensor grad_output_of(const Op& op, const std::string& what, Pass* pass);
  void run_forward(const Op& op, const at::Tensor& input, Pass* pass);
  void run_backward(const Op& op, const at::Tensor& grad_output, Pass* pass);
  void pump_offloads(Pass* pass);
  void pump_reloads(Pass* pass);
  IterationRecord read_back(Pass* pass, CUDAEvent& start, double start_us);

  const Problem& p_;
  const GptConfig& cfg_;
  const EngineOptions& options_;
  const Group& group_;
  const DeviceSchedule& ds_;
  const int d_, S_, M_;
  const at::Device device_;
  const std::string me_;
  CUDAStream compute_, d2h_, h2d_;
  Hops hops_;
  PinnedPool pinned_;
  std::vector<ChunkParams> params_;
  std::vector<AdamState> adam_;
  std::vector<bool> recomputed_, offloaded_;  // per slot
};

CudaRankLoop::CudaRankLoop(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
                           const EngineOptions& options)
    : p_(p),
      cfg_(cfg),
      options_(options),
      group_(group),
      ds_(s.devices[group.rank]),
      d_(group.rank),
      S_(p.num_stages()),
      M_(p.num_microbatches),
      device_(group.device),
      me_("rank " + std::to_string(group.rank)),
      compute_(c10::cuda::getStreamFromPool(false, group.device.index())),
      d2h_(c10::cuda::getStreamFromPool(false, group.device.index())),
      h2d_(c10::cuda::getStreamFromPool(false, group.device.index())),
      hops_(p, s, cfg, group) {
  // fp32 throughout, so that --check compares like with like.
  at::globalContext().setAllowTF32CuBLAS(false);
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, S_);
  params_.resize(S_);
  adam_.resize(S_);
  for (int st = 0; st < S_; st++)
    if (p.device_of(st) == d_ || options.check) {
      params_[st] = init_chunk(cfg, layouts[st]);
      to_device(&params_[st], device_);
    }
  recomputed_.assign(static_cast<size_t>(S_) * M_, false);
  offloaded_.assign(static_cast<size_t>(S_) * M_, false);
  for (const Op& op : ds_.compute)
    if (op.kind == OpKind::kR) recomputed_[slot(op.stage, op.microbatch)] = true;
  for (const Op& op : ds_.offloads) offloaded_[slot(op.stage, op.microbatch)] = true;
}

Status CudaRankLoop::run_iteration(int it, RankReport* report) {
  try {
    wait_work(group_.pg->barrier(), group_.timeout_s, me_ + ": start barrier of iteration " + std::to_string(it));
    c10::cuda::CUDAStreamGuard on_compute(compute_);
    for (int st = 0; st < S_; st++)
      if (p_.device_of(st) == d_) zero_grads(&params_[st]);
    Pass pass(static_cast<size_t>(S_) * M_, num_op_ids(p_));
    for (int i = 0; i < M_; i++) pass.batches.push_back(to_device(make_batch(cfg_, it, i), device_));
    pass.loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
    synchronize(device_);
    reset_allocator_peaks(device_);
    CUDAEvent start(cudaEventDefault);
    start.record(compute_);
    start.synchronize();
    const double start_us = monotonic_us();

    hops_.begin_iteration();
    int ops_done = 0;
    for (const Op& op : ds_.compute) {
      if (options_.before_op) options_.before_op(it, ops_done);
      run_compute_op(op, &pass);
      ops_done++;
    }
    OPTPIPE_CHECK(pass.next_offload == ds_.offloads.size() && pass.next_reload == ds_.reloads.size(),
                  me_ + ": an offload or reload was never enqueued (the schedule validated, so this is a bug)");
    hops_.end_iteration();
    synchronize(device_);

    IterationRecord rec = read_back(&pass, start, start_us);
    pinned_.release_all();
    at::Tensor loss_t = at::full({1}, pass.loss.item<double>(), at::kDouble);
    std::vector<at::Tensor> bufs{loss_t};
    wait_work(group_.pg->allreduce(bufs), group_.timeout_s, me_ + ": end of iteration " + std::to_string(it));
    rec.loss = loss_t.item<double>();
    report->iterations.push_back(std::move(rec));
    report->pinned_bytes = pinned_.total_bytes();

    if (options_.check && it == 0) {
      report->checked = true;
      report->check = check_gradients(p_, d_, cfg_, params_, it, report->iterations.back().loss);
    }
    for (int st = 0; st < S_; st++)
      if (p_.device_of(st) == d_) adam_step(&params_[st], &adam_[st], options_.lr);
    synchronize(device_);
  } catch (const std::exception& e) {
    return Status::Invalid(me_ + ": " + e.what());
  }
  return Status::Ok();
}

void CudaRankLoop::run_compute_op(const Op& op, Pass* pass) {
  const int st = op.stage, i = op.microbatch;
  const size_t k = slot(st, i);
  const int id = op_id(p_, op);
  const std::string what = me_ + ": " + op_name(op);
  if (op.kind == OpKind::kWait) {
    OPTPIPE_CHECK(pass->offload_end[k], what + ": its offload was not enqueued before it");
    pass->offload_end[k]->block(compute_);
    pass->op_start[id] = pass->events.record(compute_);
    pass->op_end[id] = pass->events.record(compute_);
    pass->timed.push_back({op, pass->op_start[id], pass->op_end[id]});
    pump_reloads(pass);
    return;
  }
  at::Tensor input, grad_output;
  if (op.kind == OpKind::kF || op.kind == OpKind::kR) input = input_of(op, what, pass);
  if (op.kind == OpKind::kB || op.kind == OpKind::kBW) grad_output = grad_output_of(op, what, pass);
  if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && offloaded_[k]) {
    OPTPIPE_CHECK(pass->reload_end[k], what + ": its reload was not enqueued before it");
    pass->reload_end[k]->block(compute_);
    // Allocated on the copy stream, freed after this op: the allocator must wait for it.
    for (at::Tensor& t : pass->stash[k].tensors) t.record_stream(compute_);
  }
  pass->op_start[id] = pass->events.record(compute_);
  pump_reloads(pass);  // a reload anchored on this op may go now
  switch (op.kind) {
    case OpKind::kF:
    case OpKind::kR: run_forward(op, input, pass); break;
    case OpKind::kB:
    case OpKind::kBW: run_backward(op, grad_output, pass); break;
    case OpKind::kW: {
      WeightStash& w = pass->w_stash[k];
      const int64_t w_bytes = stash_bytes(w);
      backward_weight(&params_[st], std::move(w));
      w = WeightStash();
      pass->op_end[id] = pass->events.record(compute_);
      pass->tally.push_back({pass->op_end[id], -w_bytes});
      break;
    }
    default: OPTPIPE_CHECK(false, what + ": not a compute op");
  }
  pass->timed.push_back({op, pass->op_start[id], pass->op_end[id]});
  pump_offloads(pass);
  pump_reloads(pass);
}

at::Tensor CudaRankLoop::input_of(const Op& op, const std::string& what, Pass* pass) {
  const int st = op.stage, i = op.microbatch;
  if (st == 0) return pass->batches[i].tokens;
  if (op.kind == OpKind::kR) {
    const at::Tensor& kept = pass->stash[slot(st, i)].tensors.at(0);
    OPTPIPE_CHECK(kept.device() == device_, what + ": recomputes from an input that is offloaded");
    return kept;
  }
  if (p_.device_of(st - 1) == d_) return pass->local_act[slot(st, i)];
  return hops_.receive(op_id(p_, op), what + ": the activation from rank " + std::to_string(p_.device_of(st - 1)));
}

at::Tensor CudaRankLoop::grad_output_of(const Op& op, const std::string& what, Pass* pass) {
  const int st = op.stage, i = op.microbatch;
  if (st == S_ - 1) return at::Tensor();
  if (p_.device_of(st + 1) == d_) return pass->local_grad[slot(st, i)];
  return hops_.receive(op_id(p_, {OpKind::kB, st, i}),
                       what + ": the gradient from rank " + std::to_string(p_.device_of(st + 1)));
}

// F or R, with the tally the CPU engine keeps: F adds its stash at its start, a stash that will
// be recomputed keeps only its input from F's end, R adds back the rest.
void CudaRankLoop::run_forward(const Op& op, const at::Tensor& input, Pass* pass) {
  const int st = op.stage, i = op.microbatch;
  const size_t k = slot(st, i);
  const int id = op_id(p_, op);
  at::Tensor out;
  Stash stash = forward(cfg_, params_[st], input, pass->batches[i], &out);
  const int64_t full = stash_bytes(stash.tensors);
  pass->op_end[id] = pass->events.record(compute_);
  if (op.kind == OpKind::kR) {
    pass->tally.push_back({pass->op_start[id], full - stash_bytes(pass->stash[k].tensors)});
    pass->stash[k] = std::move(stash);
    return;
  }
  pass->tally.push_back({pass->op_start[id], full});
  if (recomputed_[k]) {
    stash.tensors.resize(1);
    pass->tally.push_back({pass->op_end[id], stash_bytes(stash.tensors) - full});
  }
  if (params_[st].layout.head) {
    pass->loss.add_(out.to(at::kDouble));
  } else if (p_.device_of(st + 1) != d_) {
    hops_.send(out, p_.device_of(st + 1), op_id(p_, {OpKind::kF, st + 1, i}));
  } else {
    pass->local_act[slot(st + 1, i)] = out;
  }
  pass->stash[k] = std::move(stash);
}

// B or BW: F's stash becomes the input gradient and, for B, what W still needs.
void CudaRankLoop::run_backward(const Op& op, const at::Tensor& grad_output, Pass* pass) {
  const int st = op.stage, i = op.microbatch;
  const size_t k = slot(st, i);
  const int id = op_id(p_, op);
  int64_t delta = 0;
  at::Tensor dx = backward_step(cfg_, &params_[st], std::move(pass->stash[k]), grad_output, pass->batches[i],
                                op.kind == OpKind::kBW, &pass->w_stash[k], &delta);
  pass->op_end[id] = pass->events.record(compute_);
  pass->tally.push_back({pass->op_end[id], delta});
  if (st == 0) return;
  if (p_.device_of(st - 1) != d_) {
    hops_.send(dx, p_.device_of(st - 1), op_id(p_, {OpKind::kB, st - 1, i}));
  } else {
    pass->local_grad[slot(st - 1, i)] = dx;
  }
}

// The offloads in schedule order, each once its F is enqueued.
void CudaRankLoop::pump_offloads(Pass* pass) {
  for (; pass->next_offload < ds_.offloads.size(); pass->next_offload++) {
    const Op& op = ds_.offloads[pass->next_offload];
    const size_t k = slot(op.stage, op.microbatch);
    CUDAEvent* f_end = pass->op_end[op_id(p_, {OpKind::kF, op.stage, op.microbatch})];
    if (!f_end) return;
    f_end->block(d2h_);
    c10::cuda::CUDAStreamGuard on_copy(d2h_);
    CUDAEvent* start = pass->events.record(d2h_);
    std::vector<at::Tensor> host;
    for (at::Tensor& t : pass->stash[k].tensors) {
      host.push_back(pinned_.take(t));
      host.back().copy_(t, /*non_blocking=*/true);
      t.record_stream(d2h_);  // freed below while the copy may still read it
    }
    const int64_t bytes = stash_bytes(pass->stash[k].tensors);
    pass->stash[k].tensors = std::move(host);
    pass->offload_end[k] = pass->events.record(d2h_);
    pass->tally.push_back({pass->offload_end[k], -bytes});
    pass->timed.push_back({op, start, pass->offload_end[k]});
  }
}

// The reloads in issue order, each once its anchor has started and its offload and `after` ops
// are enqueued; the copy stream waits on all of their events.
void CudaRankLoop::pump_reloads(Pass* pass) {
  for (; pass->next_reload < ds_.reloads.size(); pass->next_reload++) {
    const ReloadEntry& r = ds_.reloads[pass->next_reload];
    const size_t k = slot(r.reload.stage, r.reload.microbatch);
    std::vector<CUDAEvent*> gates{pass->op_start[op_id(p_, r.anchor)], pass->offload_end[k]};
    for (const Op& x : r.after)
      gates.push_back(x.kind == OpKind::kOffload ? pass->offload_end[slot(x.stage, x.microbatch)]
                                                 : pass->op_end[op_id(p_, x)]);
    if (std::find(gates.begin(), gates.end(), nullptr) != gates.end()) return;
    for (CUDAEvent* e : gates) e->block(h2d_);
    c10::cuda::CUDAStreamGuard on_copy(h2d_);
    CUDAEvent* start = pass->events.record(h2d_);
    std::vector<at::Tensor> back;
    for (const at::Tensor& h : pass->stash[k].tensors) {
      back.push_back(at::empty(h.sizes(), h.options().device(device_).pinned_memory(false)));
      back.back().copy_(h, /*non_blocking=*/true);
    }
    pass->stash[k].tensors = std::move(back);
    pass->tally.push_back({start, stash_bytes(pass->stash[k].tensors)});
    pass->reload_end[k] = pass->events.record(h2d_);
    pass->timed.push_back({r.reload, start, pass->reload_end[k]});
  }
}

// Once the iteration has run: op times from the events (on the host clock, from `start`), the
// activation tally in event order, the allocator's peaks.
IterationRecord CudaRankLoop::read_back(Pass* pass, CUDAEvent& start, double start_us) {
  auto at_us = [&](CUDAEvent* e) { return start_us + 1e3 * static_cast<double>(start.elapsed_time(*e)); };
  IterationRecord rec;
  rec.start_us = start_us;
  for (const Pass::Timed& t : pass->timed) rec.ops.push_back({t.op, at_us(t.start), at_us(t.end)});
  std::vector<std::pair<double, int64_t>> changes;
  for (const auto& [e, bytes] : pass->tally) changes.push_back({at_us(e), bytes});
  std::stable_sort(changes.begin(), changes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  int64_t live = 0;
  rec.memory.push_back({start_us, 0});
  for (const auto& [time_us, bytes] : changes) {
    live += bytes;
    rec.memory.push_back({time_us, live});
    rec.peak_activation_bytes = std::max(rec.peak_activation_bytes, live);
  }
  const AllocatorPeaks peaks = allocator_peaks(device_);
  rec.allocator_peak_bytes = peaks.allocated_bytes;
  rec.allocator_reserved_bytes = peaks.reserved_bytes;
  return rec;
}

}  // namespace

Result<RankReport> run_rank_cuda(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
                                 const EngineOptions& options) {
  using R = Result<RankReport>;
  c10::cuda::CUDAGuard on_device(group.device.index());
  RankReport report;
  report.rank = group.rank;
  report.device = device_name(group.device);
  report.hops = group.hops_over_nccl ? "nccl" : "gloo through host memory";
  try {
    CudaRankLoop rank(p, s, cfg, group, options);
    for (int it = 0; it < options.iterations; it++)
      if (Status st = rank.run_iteration(it, &report); !st.ok()) return R::Error(std::move(st));
  } catch (const std::exception& e) {
    return R::Error(Status::Invalid("rank " + std::to_string(group.rank) + ": " + e.what()));
  }
  return R::Of(std::move(report));
}

}  // namespace optpipe::runtime
