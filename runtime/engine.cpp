#include "engine.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <malloc.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

namespace optpipe::runtime {

namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// Everything one iteration shares between the compute stream and the two transfer workers.
class Iteration {
 public:
  Iteration(const Problem& p, int device, double timeout_s)
      : p_(p),
        timeout_s_(timeout_s),
        S_(p.num_stages()),
        M_(p.num_microbatches),
        budget_bytes_(p.devices[device].mem_budget_bytes - p.devices[device].static_bytes) {
    const size_t n = static_cast<size_t>(S_) * M_;
    f_stash_.resize(n);
    f_done_.assign(n, false);
    offloaded_.assign(n, false);
    reloaded_.assign(n, false);
    started_.assign(num_op_ids(p), false);
    finished_.assign(num_op_ids(p), false);
    record_.start_us = monotonic_us();
    record_.memory.push_back({record_.start_us, 0});
  }

  size_t slot(int s, int i) const { return static_cast<size_t>(s) * M_ + i; }

  // Blocks until `ready()` (called under the lock) or failure; a timeout is a failure, and so
  // is a wait no thread of this rank can end: every thread that is still running waits here,
  // and none of their conditions holds (say, room for a forward that only a later backward
  // would free, with no offload in flight) — that fails at once, not after the timeout.
  void wait_for(const std::function<bool()>& ready, const std::string& what) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    waiters_.push_back({&ready, &what});
    struct Leave {
      std::vector<Waiter>& waiters;
      const std::string* what;
      ~Leave() {
        for (size_t k = 0; k < waiters.size(); k++)
          if (waiters[k].what == what) {
            waiters.erase(waiters.begin() + k);
            break;
          }
      }
    } leave{waiters_, &what};
    while (!failed_ && !ready()) {
      if (stuck()) {
        std::string all;
        for (const Waiter& w : waiters_) all += (all.empty() ? "" : "; ") + *w.what;
        const std::string why = "no thread of this rank can go on (waiting for: " + all +
                                "): the measured activations outgrow the problem's figures, or the schedule's "
                                "offloads cannot make room";
        error_ = why;
        failed_ = true;
        cv_.notify_all();
        throw Failure(why);
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready())
        throw Failure("timed out after " + seconds(timeout_s_) + " waiting for " + what);
    }
    if (failed_) throw Failure("stopped: another thread of this rank failed");
  }

  // A thread of this rank (the compute stream, a transfer worker) is done with its list.
  void thread_done() {
    std::lock_guard<std::mutex> lock(mu_);
    running_--;
    cv_.notify_all();
  }

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) error_ = why;
    failed_ = true;
    cv_.notify_all();
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  // Adds `delta` live activation bytes at `time_us`.
  void account(double time_us, int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    account_locked(time_us, delta);
  }

  // The budget holds whatever the timing: an allocation of `bytes` (the problem's figure, as the
  // simulator counts it at the op's start) waits until frees in flight (offloads) make room.
  // How long it held each allocation is recorded: a schedule that fits under any timing
  // (any_timing.h) is never held here, only by its own WAITs and `after` ops.
  void allocate(int64_t bytes, const std::string& what) {
    auto room = [&] { return live_bytes_ + bytes <= budget_bytes_; };
    const double asked_us = monotonic_us();
    // Checked and taken under one lock: another thread may take the room a wait saw.
    for (bool held = false;; held = true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (room()) {
          const double now_us = monotonic_us();
          if (held) {
            record_.gate_holds++;
            record_.gate_held_us += now_us - asked_us;
          }
          account_locked(now_us, bytes);
          return;
        }
      }
      wait_for(room, "room for " + what + " within the budget (" + std::to_string(bytes) + " bytes more)");
    }
  }

  void record(const Op& op, double start_us, double end_us) {
    std::lock_guard<std::mutex> lock(mu_);
    record_.ops.push_back({op, start_us, end_us});
  }

  void mark_started(const Op& op) {
    std::lock_guard<std::mutex> lock(mu_);
    started_[op_id(p_, op)] = true;
    cv_.notify_all();
  }
  void mark_finished(const Op& op) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[op_id(p_, op)] = true;
    cv_.notify_all();
  }

  // The compute stream publishes F(s,i)'s stash; the offload worker may then move it.
  void put_stash(int s, int i, Stash stash) {
    std::lock_guard<std::mutex> lock(mu_);
    f_stash_[slot(s, i)] = std::move(stash);
    f_done_[slot(s, i)] = true;
    cv_.notify_all();
  }
  Stash take_stash(int s, int i) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(f_stash_[slot(s, i)]);
  }
  Stash& stash_for_recompute(int s, int i) { return f_stash_[slot(s, i)]; }  // compute stream only

  // Device→host worker: each offload after its F, in schedule order.
  void run_offloads(const std::vector<Op>& offloads) {
    try {
      for (const Op& op : offloads) {
        const size_t k = slot(op.stage, op.microbatch);
        wait_for([&] { return f_done_[k]; }, "F" + std::to_string(op.microbatch) + " s" + std::to_string(op.stage));
        const double start = monotonic_us();
        std::vector<at::Tensor> device_copy;
        {
          std::lock_guard<std::mutex> lock(mu_);
          device_copy = f_stash_[k].tensors;
        }
        std::vector<at::Tensor> host;
        for (const at::Tensor& t : device_copy) host.push_back(t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
        const int64_t bytes = stash_bytes(device_copy);
        device_copy.clear();
        const double end = monotonic_us();
        std::lock_guard<std::mutex> lock(mu_);
        f_stash_[k].tensors = std::move(host);
        offloaded_[k] = true;
        account_locked(end, -bytes);
        record_.ops.push_back({op, start, end});
        cv_.notify_all();
      }
    } catch (const std::exception& e) {
      fail(std::string("offload: ") + e.what());
    }
    thread_done();
  }

  // Host→device worker: each reload once its anchor has started and its offload is done.
  void run_reloads(const std::vector<ReloadEntry>& reloads, const at::Device& device) {
    try {
      for (const ReloadEntry& r : reloads) {
        const size_t k = slot(r.reload.stage, r.reload.microbatch);
        const int anchor = op_id(p_, r.anchor);
        // The ops whose ends make room, if any: offloads, or compute ops of this rank.
        auto room_made = [&] {
          for (const Op& x : r.after)
            if (!(x.kind == OpKind::kOffload ? offloaded_[slot(x.stage, x.microbatch)] : finished_[op_id(p_, x)]))
              return false;
          return true;
        };
        std::string after_names;
        for (const Op& x : r.after) after_names += " and " + op_name(x);
        wait_for([&] { return started_[anchor] && offloaded_[k] && room_made(); },
                 "the anchor " + op_name(r.anchor) + " of " + op_name(r.reload) +
                     after_names);
        const int64_t predicted = p_.stages[r.reload.stage].act_f_bytes;
        allocate(predicted, op_name(r.reload));
        const double start = monotonic_us();
        std::vector<at::Tensor> host;
        {
          std::lock_guard<std::mutex> lock(mu_);
          host = f_stash_[k].tensors;
          account_locked(start, stash_bytes(host) - predicted);
        }
        std::vector<at::Tensor> back;
        for (const at::Tensor& t : host) back.push_back(t.to(device, false, true));
        const double end = monotonic_us();
        std::lock_guard<std::mutex> lock(mu_);
        f_stash_[k].tensors = std::move(back);
        reloaded_[k] = true;
        record_.ops.push_back({r.reload, start, end});
        cv_.notify_all();
      }
    } catch (const std::exception& e) {
      fail(std::string("reload: ") + e.what());
    }
    thread_done();
  }

  void wait_offloaded(int s, int i) {
    const size_t k = slot(s, i);
    wait_for([&] { return offloaded_[k]; }, "the offload of F" + std::to_string(i) + " s" + std::to_string(s));
  }
  void wait_reloaded(int s, int i) {
    const size_t k = slot(s, i);
    wait_for([&] { return reloaded_[k]; }, "the reload of F" + std::to_string(i) + " s" + std::to_string(s));
  }

  IterationRecord finish() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(record_);
  }

 private:
  // Every running thread waits, and no wait can end. Called under the lock.
  bool stuck() const {
    if (static_cast<int>(waiters_.size()) < running_) return false;
    for (const Waiter& w : waiters_)
      if ((*w.ready)()) return false;
    return true;
  }

  void account_locked(double time_us, int64_t delta) {
    live_bytes_ += delta;
    record_.memory.push_back({time_us, live_bytes_});
    record_.peak_activation_bytes = std::max(record_.peak_activation_bytes, live_bytes_);
  }

  const Problem& p_;
  double timeout_s_;
  int S_, M_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool failed_ = false;
  std::string error_;
  std::vector<Stash> f_stash_;
  std::vector<bool> f_done_, offloaded_, reloaded_, started_, finished_;
  int64_t budget_bytes_;  // for activations: the device's budget less its static bytes
  int64_t live_bytes_ = 0;
  IterationRecord record_;
  struct Waiter {
    const std::function<bool()>* ready;
    const std::string* what;
  };
  std::vector<Waiter> waiters_;
  int running_ = 3;  // the compute stream and the two transfer workers
};

// c10 appends a backtrace to its messages: the first line says what happened.
std::string first_line(std::string msg) {
  if (size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

struct Peer {
  int rank = -1;
  at::Tensor buffer;
  c10::intrusive_ptr<c10d::Work> work;
};

}  // namespace

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, double timeout_s, const std::string& what) {
  try {
    work->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": " + first_line(e.what()));
  }
}

Result<Group> join_group(const RankSetup& setup, double timeout_s) {
  using R = Result<Group>;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(setup.master_port);
    so.isServer = setup.rank == 0;
    so.numWorkers = setup.world_size;
    so.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(setup.master_addr, so);
    auto pg_options = c10d::ProcessGroupGloo::Options::create(timeout);
    pg_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(setup.master_addr));
    return R::Of(Group{c10::make_intrusive<c10d::ProcessGroupGloo>(store, setup.rank, setup.world_size, pg_options),
                       setup.rank, setup.world_size, timeout_s});
  } catch (const std::exception& e) {
    return R::Error(Status::Invalid("rank " + std::to_string(setup.rank) + ": cannot join the process group at " +
                                    setup.master_addr + ":" + std::to_string(setup.master_port) + " within " +
                                    seconds(timeout_s) + ": " + first_line(e.what())));
  }
}

void keep_freed_memory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

void reserve_heap(int64_t bytes) {
  constexpr int64_t kBlock = 4 << 20;
  std::vector<char*> blocks;
  for (int64_t done = 0; done < bytes; done += kBlock) {
    char* b = static_cast<char*>(std::malloc(kBlock));
    if (!b) break;
    for (int64_t i = 0; i < kBlock; i += 4096) reinterpret_cast<volatile char*>(b)[i] = 0;
    blocks.push_back(b);
  }
  for (char* b : blocks) std::free(b);
}

Result<RankReport> run_rank(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& group,
                            const EngineOptions& options) {
  using R = Result<RankReport>;
  const int d = group.rank, S = p.num_stages(), M = p.num_microbatches;
  const double timeout_s = group.timeout_s;
  if (group.world_size != p.num_devices)
    return R::Error(Status::Invalid("world size " + std::to_string(group.world_size) + " but the problem has " +
                                    std::to_string(p.num_devices) + " devices"));

  const at::Device device(at::kCPU);
  const std::string me = "rank " + std::to_string(d);

  // Chunks of this device, and the whole model when checking against the reference.
  const std::vector<ChunkLayout> layouts = chunk_layouts(cfg, S);
  std::vector<ChunkParams> params(S);
  std::vector<AdamState> adam(S);
  for (int st = 0; st < S; st++)
    if (p.device_of(st) == d || options.check) params[st] = init_chunk(cfg, layouts[st]);

  c10d::ProcessGroupGloo* pg = group.pg.get();
  const DeviceSchedule& ds = s.devices[d];
  std::vector<bool> recomputed(static_cast<size_t>(S) * M, false), offloaded(static_cast<size_t>(S) * M, false);
  for (const Op& op : ds.compute)
    if (op.kind == OpKind::kR) recomputed[op.stage * M + op.microbatch] = true;
  for (const Op& op : ds.offloads) offloaded[op.stage * M + op.microbatch] = true;
  const int64_t b = cfg.microbatch_size, T = cfg.model.seq_len, h = cfg.model.hidden;

  // Room for the predicted peak of activations and for the temporaries of the ops.
  reserve_heap(std::min<int64_t>(p.every_activation_bytes(d), p.devices[d].mem_budget_bytes - p.devices[d].static_bytes) +
               (64 << 20));

  RankReport report;
  report.rank = d;
  for (int it = 0; it < options.iterations; it++) {
    try {
      wait_work(pg->barrier(), timeout_s, me + ": start barrier of iteration " + std::to_string(it));
    } catch (const std::exception& e) {
      return R::Error(Status::Invalid(e.what()));
    }
    for (int st = 0; st < S; st++)
      if (p.device_of(st) == d) zero_grads(&params[st]);
    std::vector<Batch> batches;
    for (int i = 0; i < M; i++) batches.push_back(make_batch(cfg, it, i));

    Iteration state(p, d, timeout_s);
    // Post every receive of the iteration: activations into F, gradients into B/BW.
    std::vector<Peer> act_in(static_cast<size_t>(S) * M), grad_in(static_cast<size_t>(S) * M);
    std::vector<at::Tensor> local_act(static_cast<size_t>(S) * M), local_grad(static_cast<size_t>(S) * M);
    for (const Op& op : ds.compute) {
      const size_t k = static_cast<size_t>(op.stage) * M + op.microbatch;
      Peer* peer = nullptr;
      int src = -1, tag = 0;
      if (op.kind == OpKind::kF && op.stage > 0 && p.device_of(op.stage - 1) != d) {
        peer = &act_in[k], src = p.device_of(op.stage - 1), tag = op_id(p, op);
      } else if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && op.stage < S - 1 && p.device_of(op.stage + 1) != d) {
        peer = &grad_in[k], src = p.device_of(op.stage + 1), tag = op_id(p, {OpKind::kB, op.stage, op.microbatch});
      }
      if (!peer) continue;
      peer->rank = src;
      peer->buffer = at::empty({b, T, h});
      std::vector<at::Tensor> bufs{peer->buffer};
      peer->work = pg->recv(bufs, src, tag);
    }
    std::vector<std::pair<at::Tensor, c10::intrusive_ptr<c10d::Work>>> sends;
    auto send = [&](const at::Tensor& t, int dst, int tag) {
      std::vector<at::Tensor> bufs{t.contiguous()};
      sends.emplace_back(bufs[0], pg->send(bufs, dst, tag));
    };

    std::thread offload_worker([&] { state.run_offloads(ds.offloads); });
    std::thread reload_worker([&] { state.run_reloads(ds.reloads, device); });
    std::vector<WeightStash> w_stash(static_cast<size_t>(S) * M);
    double loss = 0;
    std::string error;
    int ops_done = 0;
    try {
      for (const Op& op : ds.compute) {
        if (options.before_op) options.before_op(it, ops_done);
        const int st = op.stage, i = op.microbatch;
        if (op.kind == OpKind::kWait) {
          state.wait_offloaded(st, i);
          const double now = monotonic_us();
          state.mark_started(op);
          state.record(op, now, now);
          state.mark_finished(op);
          ops_done++;
          continue;
        }
        const size_t k = static_cast<size_t>(st) * M + i;
        ChunkParams& chunk = params[st];
        const std::string what = me + ": " + op_name(op);
        // Inputs first, so the op's recorded time is compute only.
        at::Tensor input, grad_output;
        if (op.kind == OpKind::kF || op.kind == OpKind::kR) {
          if (st == 0) {
            input = batches[i].tokens;
          } else if (op.kind == OpKind::kR) {
            input = state.stash_for_recompute(st, i).tensors.at(0);
          } else if (act_in[k].work) {
            wait_work(act_in[k].work, timeout_s,
                      what + ": waiting for the activation from rank " + std::to_string(act_in[k].rank));
            input = act_in[k].buffer;
          } else {
            input = local_act[k];
          }
        }
        if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && st < S - 1) {
          if (grad_in[k].work) {
            wait_work(grad_in[k].work, timeout_s,
                      what + ": waiting for the gradient from rank " + std::to_string(grad_in[k].rank));
            grad_output = grad_in[k].buffer;
          } else {
            grad_output = local_grad[k];
          }
        }
        if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && offloaded[k]) state.wait_reloaded(st, i);
        OPTPIPE_CHECK(input.defined() || (op.kind != OpKind::kF && op.kind != OpKind::kR), what + ": no input");

        const StageSpec& spec = p.stages[st];
        if (op.kind == OpKind::kF) state.allocate(spec.act_f_bytes, op_name(op));
        if (op.kind == OpKind::kR) state.allocate(spec.act_f_bytes - spec.act_input_bytes, op_name(op));
        state.mark_started(op);
        const double start = monotonic_us();
        switch (op.kind) {
          case OpKind::kF:
          case OpKind::kR: {
            at::Tensor out;
            Stash stash = forward(cfg, chunk, input, batches[i], &out);
            const int64_t full = stash_bytes(stash.tensors);
            const double end = monotonic_us();
            if (op.kind == OpKind::kF) {
              state.account(end, full - spec.act_f_bytes);  // measured instead of predicted
              if (recomputed[k]) {
                stash.tensors.resize(1);
                state.account(end, stash_bytes(stash.tensors) - full);
              }
              if (chunk.layout.head) {
                loss += out.item<double>();
              } else if (p.device_of(st + 1) != d) {
                send(out, p.device_of(st + 1), op_id(p, {OpKind::kF, st + 1, i}));
              } else {
                local_act[static_cast<size_t>(st + 1) * M + i] = out;
              }
              state.put_stash(st, i, std::move(stash));
            } else {
              state.account(end, full - stash_bytes(state.stash_for_recompute(st, i).tensors) -
                                     (spec.act_f_bytes - spec.act_input_bytes));
              state.stash_for_recompute(st, i) = std::move(stash);
            }
            state.record(op, start, end);
            break;
          }
          case OpKind::kB:
          case OpKind::kBW: {
            Stash stash = state.take_stash(st, i);
            const int64_t f_bytes = stash_bytes(stash.tensors);
            WeightStash& w = w_stash[k];
            at::Tensor dx = backward_input(cfg, &chunk, std::move(stash), grad_output, batches[i], &w);
            if (st > 0) {
              if (p.device_of(st - 1) != d) {
                send(dx, p.device_of(st - 1), op_id(p, {OpKind::kB, st - 1, i}));
              } else {
                local_grad[static_cast<size_t>(st - 1) * M + i] = dx;
              }
            }
            int64_t delta = -f_bytes;
            if (op.kind == OpKind::kBW) {
              backward_weight(&chunk, std::move(w));
              w = WeightStash();
            } else {
              delta += stash_bytes(w);
            }
            const double end = monotonic_us();
            state.account(end, delta);
            state.record(op, start, end);
            break;
          }
          case OpKind::kW: {
            const int64_t w_bytes = stash_bytes(w_stash[k]);
            backward_weight(&chunk, std::move(w_stash[k]));
            w_stash[k] = WeightStash();
            const double end = monotonic_us();
            state.account(end, -w_bytes);
            state.record(op, start, end);
            break;
          }
          default: OPTPIPE_CHECK(false, what + ": not a compute op");
        }
        state.mark_finished(op);
        ops_done++;
      }
      for (auto& [t, work] : sends) wait_work(work, timeout_s, me + ": sending to a peer");
    } catch (const std::exception& e) {
      error = e.what();
      state.fail(error);
    }
    state.thread_done();
    offload_worker.join();
    reload_worker.join();
    if (error.empty() && state.failed()) error = me + ": " + state.error();
    if (!error.empty()) return R::Error(Status::Invalid(error));

    // Everyone learns the loss from the last stage's rank; this also ends the iteration.
    at::Tensor loss_t = at::full({1}, loss, at::kDouble);
    try {
      std::vector<at::Tensor> bufs{loss_t};
      wait_work(pg->allreduce(bufs), timeout_s, me + ": end of iteration " + std::to_string(it));
    } catch (const std::exception& e) {
      return R::Error(Status::Invalid(e.what()));
    }
    IterationRecord rec = state.finish();
    rec.loss = loss_t.item<double>();
    report.iterations.push_back(std::move(rec));

    if (options.check && it == 0) {
      const ReferenceResult ref = reference_gradients(cfg, params, it);
      report.checked = true;
      report.check.loss = report.iterations.back().loss;
      report.check.reference_loss = ref.loss;
      for (int st = 0; st < S; st++) {
        if (p.device_of(st) != d) continue;
        for (size_t q = 0; q < params[st].grads.size(); q++) {
          const at::Tensor& g = params[st].grads[q];
          const at::Tensor& g_ref = ref.grads[st][q];
          const double scale = std::max(g_ref.abs().max().item<double>(), 1e-30);
          const double err = (g - g_ref).abs().max().item<double>() / scale;
          report.check.num_params_checked++;
          if (err >= report.check.max_grad_rel_error) {
            report.check.max_grad_rel_error = err;
            report.check.worst_param = params[st].names[q];
          }
        }
      }
    }
    for (int st = 0; st < S; st++)
      if (p.device_of(st) == d) adam_step(&params[st], &adam[st], options.lr);
  }
  return R::Of(std::move(report));
}

}  // namespace optpipe::runtime
