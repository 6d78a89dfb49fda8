// transfers.h — private to the engine: what one iteration of a rank shares between its compute
// stream and its two transfer workers (device-to-host offloads, host-to-device reloads).
//
// All of it sits behind one lock because the three threads hand stashes to each other and the
// memory gate must see every allocation and free in one order. Waits here fail instead of
// hanging: on a timeout, on another thread's failure, or at once when no thread of the rank
// can go on.
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "gpt.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "records.h"

namespace optpipe::runtime {

class IterationState {
 public:
  IterationState(const Problem& p, int device, double timeout_s);

  size_t slot(int s, int i) const { return static_cast<size_t>(s) * M_ + i; }

  // Blocks until `ready()` (called under the lock) or failure; a timeout is a failure, and so
  // is a wait no thread of this rank can end: every thread that is still running waits here,
  // and none of their conditions holds (say, room for a forward that only a later backward
  // would free, with no offload in flight) — that fails at once, not after the timeout.
  void wait_for(const std::function<bool()>& ready, const std::string& what);

  // A thread of this rank (the compute stream, a transfer worker) is done with its list.
  void thread_done();

  void fail(const std::string& why);
  bool failed();
  std::string error();

  // Adds `delta` live activation bytes at `time_us`.
  void account(double time_us, int64_t delta);

  // The budget holds whatever the timing: an allocation of `bytes` (the problem's figure, as the
  // simulator counts it at the op's start) waits until frees in flight (offloads) make room.
  // How long it held each allocation is recorded: a schedule that fits under any timing
  // (any_timing.h) is never held here, only by its own WAITs and `after` ops.
  void allocate(int64_t bytes, const std::string& what);

  void record(const Op& op, double start_us, double end_us);
  void mark_started(const Op& op);
  void mark_finished(const Op& op);

  // The compute stream publishes F(s,i)'s stash; the offload worker may then move it.
  void put_stash(int s, int i, Stash stash);
  Stash take_stash(int s, int i);
  Stash& stash_for_recompute(int s, int i) { return f_stash_[slot(s, i)]; }  // compute stream only

  // Device→host worker: each offload after its F, in schedule order.
  void run_offloads(const std::vector<Op>& offloads);
  // Host→device worker: each reload once its anchor has started and its offload is done.
  void run_reloads(const std::vector<ReloadEntry>& reloads, const at::Device& device);

  void wait_offloaded(int s, int i);
  void wait_reloaded(int s, int i);

  IterationRecord finish();

 private:
  struct Waiter {
    const std::function<bool()>* ready;
    const std::string* what;
  };

  bool stuck() const;
  void account_locked(double time_us, int64_t delta);

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
  std::vector<Waiter> waiters_;
  int running_ = 3;  // the compute stream and the two transfer workers
};

}  // namespace optpipe::runtime
