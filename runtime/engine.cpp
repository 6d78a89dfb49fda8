#include "engine.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "check.h"
#include "transfers.h"
#ifdef OPTPIPE_RUNTIME_CUDA
#include "engine_cuda.h"
#endif

namespace optpipe::runtime {

namespace {

struct Peer {
  int rank = -1;
  at::Tensor buffer;
  c10::intrusive_ptr<c10d::Work> work;
};

// What one iteration's compute ops read and leave for later ones; vectors are indexed by slot.
struct Pass {
  Pass(IterationState& state, std::vector<Batch> batches, size_t num_slots)
      : state(state),
        batches(std::move(batches)),
        act_in(num_slots),
        grad_in(num_slots),
        local_act(num_slots),
        local_grad(num_slots),
        w_stash(num_slots) {}

  IterationState& state;
  std::vector<Batch> batches;
  std::vector<Peer> act_in, grad_in;              // from peers: activations into F, gradients into B/BW
  std::vector<at::Tensor> local_act, local_grad;  // from a chunk on this rank
  std::vector<std::pair<at::Tensor, c10::intrusive_ptr<c10d::Work>>> sends;  // kept alive until they complete
  std::vector<WeightStash> w_stash;
  double loss = 0;
};

// One rank over its iterations: the chunks it holds and their optimizer state.
class RankLoop {
 public:
  RankLoop(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group, const EngineOptions& options);
  Status run_iteration(int it, RankReport* report);

 private:
  size_t slot(int st, int i) const { return static_cast<size_t>(st) * M_ + i; }
  void post_receives(Pass* pass);
  std::string run_compute_stream(int it, Pass* pass);
  void run_compute_op(const Op& op, Pass* pass);
  void take_inputs(const Op& op, const std::string& what, Pass* pass, at::Tensor* input, at::Tensor* grad_output);
  void run_forward(const Op& op, const at::Tensor& input, double start_us, Pass* pass);
  void run_backward(const Op& op, const at::Tensor& grad_output, double start_us, Pass* pass);
  void run_weight(const Op& op, double start_us, Pass* pass);
  void send(const at::Tensor& t, int dst, int tag, Pass* pass);

  const Problem& p_;
  const GptConfig& cfg_;
  const EngineOptions& options_;
  c10d::ProcessGroupGloo* pg_;
  const DeviceSchedule& ds_;
  const int d_, S_, M_;
  const double timeout_s_;
  const at::Device device_{at::kCPU};
  const std::string me_;
  std::vector<ChunkParams> params_;
  std::vector<AdamState> adam_;
  std::vector<bool> recomputed_, offloaded_;  // per slot: this rank recomputes / offloads F(s,i)
};

RankLoop::RankLoop(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
                   const EngineOptions& options)
    : p_(p),
      cfg_(cfg),
      options_(options),
      pg_(group.pg.get()),
      ds_(s.devices[group.rank]),
      d_(group.rank),
      S_(p.num_stages()),
      M_(p.num_microbatches),
      timeout_s_(group.timeout_s),
      me_("rank " + std::to_string(group.rank)) {
  // Chunks of this device, and the whole model when checking against the reference.
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, S_);
  params_.resize(S_);
  adam_.resize(S_);
  for (int st = 0; st < S_; st++)
    if (p.device_of(st) == d_ || options.check) params_[st] = init_chunk(cfg, layouts[st]);

  recomputed_.assign(static_cast<size_t>(S_) * M_, false);
  offloaded_.assign(static_cast<size_t>(S_) * M_, false);
  for (const Op& op : ds_.compute)
    if (op.kind == OpKind::kR) recomputed_[slot(op.stage, op.microbatch)] = true;
  for (const Op& op : ds_.offloads) offloaded_[slot(op.stage, op.microbatch)] = true;

  // Room for the predicted peak of activations and for the temporaries of the ops.
  const int64_t activation_budget_bytes = p.devices[d_].mem_budget_bytes - p.devices[d_].static_bytes;
  reserve_heap(std::min<int64_t>(p.every_activation_bytes(d_), activation_budget_bytes) + (64 << 20));
}

Status RankLoop::run_iteration(int it, RankReport* report) {
  try {
    wait_work(pg_->barrier(), timeout_s_, me_ + ": start barrier of iteration " + std::to_string(it));
  } catch (const std::exception& e) {
    return Status::Invalid(e.what());
  }
  for (int st = 0; st < S_; st++)
    if (p_.device_of(st) == d_) zero_grads(&params_[st]);
  std::vector<Batch> batches;
  for (int i = 0; i < M_; i++) batches.push_back(make_batch(cfg_, it, i));

  // Made after the batches: it stamps the iteration's start.
  IterationState state(p_, d_, timeout_s_);
  Pass pass(state, std::move(batches), static_cast<size_t>(S_) * M_);
  post_receives(&pass);
  std::thread offload_worker([&] { state.run_offloads(ds_.offloads); });
  std::thread reload_worker([&] { state.run_reloads(ds_.reloads, device_); });
  std::string error = run_compute_stream(it, &pass);
  state.thread_done();
  offload_worker.join();
  reload_worker.join();
  if (error.empty() && state.failed()) error = me_ + ": " + state.error();
  if (!error.empty()) return Status::Invalid(error);

  // Everyone learns the loss from the last stage's rank; this also ends the iteration.
  at::Tensor loss_t = at::full({1}, pass.loss, at::kDouble);
  try {
    std::vector<at::Tensor> bufs{loss_t};
    wait_work(pg_->allreduce(bufs), timeout_s_, me_ + ": end of iteration " + std::to_string(it));
  } catch (const std::exception& e) {
    return Status::Invalid(e.what());
  }
  IterationRecord rec = state.finish();
  rec.loss = loss_t.item<double>();
  report->iterations.push_back(std::move(rec));

  if (options_.check && it == 0) {
    report->checked = true;
    report->check = check_gradients(p_, d_, cfg_, params_, it, report->iterations.back().loss);
  }
  for (int st = 0; st < S_; st++)
    if (p_.device_of(st) == d_) adam_step(&params_[st], &adam_[st], options_.lr);
  return Status::Ok();
}

// Every receive of the iteration is posted before its first op (see engine.h: no deadlock a
// simulation would not show).
void RankLoop::post_receives(Pass* pass) {
  const int64_t b = cfg_.microbatch_size, T = cfg_.model.seq_len, h = cfg_.model.hidden;
  for (const Op& op : ds_.compute) {
    const size_t k = slot(op.stage, op.microbatch);
    Peer* peer = nullptr;
    int src = -1, tag = 0;
    if (op.kind == OpKind::kF && op.stage > 0 && p_.device_of(op.stage - 1) != d_) {
      peer = &pass->act_in[k], src = p_.device_of(op.stage - 1), tag = op_id(p_, op);
    } else if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && op.stage < S_ - 1 &&
               p_.device_of(op.stage + 1) != d_) {
      peer = &pass->grad_in[k], src = p_.device_of(op.stage + 1);
      tag = op_id(p_, {OpKind::kB, op.stage, op.microbatch});
    }
    if (!peer) continue;
    peer->rank = src;
    peer->buffer = at::empty({b, T, h});
    std::vector<at::Tensor> bufs{peer->buffer};
    peer->work = pg_->recv(bufs, src, tag);
  }
}

// The compute stream: the rank's compute ops in schedule order, then its sends drained. Returns
// what went wrong ("" when nothing did); a failure also stops the transfer workers.
std::string RankLoop::run_compute_stream(int it, Pass* pass) {
  int ops_done = 0;
  try {
    for (const Op& op : ds_.compute) {
      if (options_.before_op) options_.before_op(it, ops_done);
      run_compute_op(op, pass);
      ops_done++;
    }
    for (auto& [t, work] : pass->sends) wait_work(work, timeout_s_, me_ + ": sending to a peer");
  } catch (const std::exception& e) {
    const std::string error = e.what();
    pass->state.fail(error);
    return error;
  }
  return "";
}

void RankLoop::run_compute_op(const Op& op, Pass* pass) {
  IterationState& state = pass->state;
  const int st = op.stage, i = op.microbatch;
  if (op.kind == OpKind::kWait) {
    state.wait_offloaded(st, i);
    const double now = monotonic_us();
    state.mark_started(op);
    state.record(op, now, now);
    state.mark_finished(op);
    return;
  }
  const std::string what = me_ + ": " + op_name(op);
  // Inputs first, so the op's recorded time is compute only.
  at::Tensor input, grad_output;
  take_inputs(op, what, pass, &input, &grad_output);
  if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && offloaded_[slot(st, i)]) state.wait_reloaded(st, i);
  OPTPIPE_CHECK(input.defined() || (op.kind != OpKind::kF && op.kind != OpKind::kR), what + ": no input");

  const StageSpec& spec = p_.stages[st];
  if (op.kind == OpKind::kF) state.allocate(spec.act_f_bytes, op_name(op));
  if (op.kind == OpKind::kR) state.allocate(spec.act_f_bytes - spec.act_input_bytes, op_name(op));
  state.mark_started(op);
  const double start_us = monotonic_us();
  switch (op.kind) {
    case OpKind::kF:
    case OpKind::kR: run_forward(op, input, start_us, pass); break;
    case OpKind::kB:
    case OpKind::kBW: run_backward(op, grad_output, start_us, pass); break;
    case OpKind::kW: run_weight(op, start_us, pass); break;
    default: OPTPIPE_CHECK(false, what + ": not a compute op");
  }
  state.mark_finished(op);
}

// F and R take an input, B and BW an output gradient (none at the last stage); a peer's comes
// over c10d, a chunk of this rank leaves its own in the pass.
void RankLoop::take_inputs(const Op& op, const std::string& what, Pass* pass, at::Tensor* input,
                           at::Tensor* grad_output) {
  const int st = op.stage, i = op.microbatch;
  const size_t k = slot(st, i);
  if (op.kind == OpKind::kF || op.kind == OpKind::kR) {
    const Peer& peer = pass->act_in[k];
    if (st == 0) {
      *input = pass->batches[i].tokens;
    } else if (op.kind == OpKind::kR) {
      *input = pass->state.stash_for_recompute(st, i).tensors.at(0);
    } else if (peer.work) {
      wait_work(peer.work, timeout_s_, what + ": waiting for the activation from rank " + std::to_string(peer.rank));
      *input = peer.buffer;
    } else {
      *input = pass->local_act[k];
    }
  }
  if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && st < S_ - 1) {
    const Peer& peer = pass->grad_in[k];
    if (peer.work) {
      wait_work(peer.work, timeout_s_, what + ": waiting for the gradient from rank " + std::to_string(peer.rank));
      *grad_output = peer.buffer;
    } else {
      *grad_output = pass->local_grad[k];
    }
  }
}

// F or R. The problem's bytes, allocated before the op, become the measured ones here; a stash
// that will be recomputed keeps only its input, and R's stash replaces that input.
void RankLoop::run_forward(const Op& op, const at::Tensor& input, double start_us, Pass* pass) {
  IterationState& state = pass->state;
  const int st = op.stage, i = op.microbatch;
  const StageSpec& spec = p_.stages[st];
  at::Tensor out;
  Stash stash = forward(cfg_, params_[st], input, pass->batches[i], &out);
  const int64_t full = stash_bytes(stash.tensors);
  const double end = monotonic_us();
  if (op.kind == OpKind::kF) {
    state.account(end, full - spec.act_f_bytes);  // measured instead of predicted
    if (recomputed_[slot(st, i)]) {
      stash.tensors.resize(1);
      state.account(end, stash_bytes(stash.tensors) - full);
    }
    if (params_[st].layout.head) {
      pass->loss += out.item<double>();
    } else if (p_.device_of(st + 1) != d_) {
      send(out, p_.device_of(st + 1), op_id(p_, {OpKind::kF, st + 1, i}), pass);
    } else {
      pass->local_act[slot(st + 1, i)] = out;
    }
    state.put_stash(st, i, std::move(stash));
  } else {
    state.account(end, full - stash_bytes(state.stash_for_recompute(st, i).tensors) -
                           (spec.act_f_bytes - spec.act_input_bytes));
    state.stash_for_recompute(st, i) = std::move(stash);
  }
  state.record(op, start_us, end);
}

// B or BW: F's stash becomes the input gradient, and for B what W still needs.
void RankLoop::run_backward(const Op& op, const at::Tensor& grad_output, double start_us, Pass* pass) {
  IterationState& state = pass->state;
  const int st = op.stage, i = op.microbatch;
  int64_t delta = 0;
  at::Tensor dx = backward_step(cfg_, &params_[st], state.take_stash(st, i), grad_output, pass->batches[i],
                                op.kind == OpKind::kBW, &pass->w_stash[slot(st, i)], &delta);
  if (st > 0) {
    if (p_.device_of(st - 1) != d_) {
      send(dx, p_.device_of(st - 1), op_id(p_, {OpKind::kB, st - 1, i}), pass);
    } else {
      pass->local_grad[slot(st - 1, i)] = dx;
    }
  }
  const double end = monotonic_us();
  state.account(end, delta);
  state.record(op, start_us, end);
}

void RankLoop::run_weight(const Op& op, double start_us, Pass* pass) {
  WeightStash& w = pass->w_stash[slot(op.stage, op.microbatch)];
  const int64_t w_bytes = stash_bytes(w);
  backward_weight(&params_[op.stage], std::move(w));
  w = WeightStash();
  const double end = monotonic_us();
  pass->state.account(end, -w_bytes);
  pass->state.record(op, start_us, end);
}

// Sent as soon as the op ends; waited for only at the end of the iteration.
void RankLoop::send(const at::Tensor& t, int dst, int tag, Pass* pass) {
  std::vector<at::Tensor> bufs{t.contiguous()};
  pass->sends.emplace_back(bufs[0], pg_->send(bufs, dst, tag));
}

}  // namespace

Result<RankReport> run_rank(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
                            const EngineOptions& options) {
  using R = Result<RankReport>;
  if (group.world_size != p.num_devices)
    return R::Error(Status::Invalid("world size " + std::to_string(group.world_size) + " but the problem has " +
                                    std::to_string(p.num_devices) + " devices"));
#ifdef OPTPIPE_RUNTIME_CUDA
  if (group.device.is_cuda()) return run_rank_cuda(p, s, cfg, group, options);
#endif
  OPTPIPE_CHECK(group.device.is_cpu(), "a GPU rank in a runtime built without CUDA");
  RankLoop rank(p, s, cfg, group, options);
  RankReport report;
  report.rank = group.rank;
  for (int it = 0; it < options.iterations; it++)
    if (Status st = rank.run_iteration(it, &report); !st.ok()) return R::Error(std::move(st));
  return R::Of(std::move(report));
}

}  // namespace optpipe::runtime
