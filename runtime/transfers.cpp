#include "transfers.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "timeouts.h"

namespace optpipe::runtime {

namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

IterationState::IterationState(const Problem& p, int device, double timeout_s)
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

void IterationState::wait_for(const std::function<bool()>& ready, const std::string& what) {
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

void IterationState::thread_done() {
  std::lock_guard<std::mutex> lock(mu_);
  running_--;
  cv_.notify_all();
}

void IterationState::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_) error_ = why;
  failed_ = true;
  cv_.notify_all();
}

bool IterationState::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

std::string IterationState::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void IterationState::account(double time_us, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  account_locked(time_us, delta);
}

void IterationState::allocate(int64_t bytes, const std::string& what) {
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

void IterationState::record(const Op& op, double start_us, double end_us) {
  std::lock_guard<std::mutex> lock(mu_);
  record_.ops.push_back({op, start_us, end_us});
}

void IterationState::mark_started(const Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  started_[op_id(p_, op)] = true;
  cv_.notify_all();
}

void IterationState::mark_finished(const Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_[op_id(p_, op)] = true;
  cv_.notify_all();
}

void IterationState::put_stash(int s, int i, Stash stash) {
  std::lock_guard<std::mutex> lock(mu_);
  f_stash_[slot(s, i)] = std::move(stash);
  f_done_[slot(s, i)] = true;
  cv_.notify_all();
}

Stash IterationState::take_stash(int s, int i) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(f_stash_[slot(s, i)]);
}

void IterationState::run_offloads(const std::vector<Op>& offloads) {
  try {
    for (const Op& op : offloads) {
      const size_t k = slot(op.stage, op.microbatch);
      std::string forward = "F";  // built with +=: GCC 12 warns falsely on "F" + std::string
      forward += std::to_string(op.microbatch) + " s" + std::to_string(op.stage);
      wait_for([&] { return f_done_[k]; }, forward);
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

void IterationState::run_reloads(const std::vector<ReloadEntry>& reloads, const at::Device& device) {
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
               "the anchor " + op_name(r.anchor) + " of " + op_name(r.reload) + after_names);
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

void IterationState::wait_offloaded(int s, int i) {
  const size_t k = slot(s, i);
  wait_for([&] { return offloaded_[k]; }, "the offload of F" + std::to_string(i) + " s" + std::to_string(s));
}

void IterationState::wait_reloaded(int s, int i) {
  const size_t k = slot(s, i);
  wait_for([&] { return reloaded_[k]; }, "the reload of F" + std::to_string(i) + " s" + std::to_string(s));
}

IterationRecord IterationState::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(record_);
}

// Every running thread waits, and no wait can end. Called under the lock.
bool IterationState::stuck() const {
  if (static_cast<int>(waiters_.size()) < running_) return false;
  for (const Waiter& w : waiters_)
    if ((*w.ready)()) return false;
  return true;
}

void IterationState::account_locked(double time_us, int64_t delta) {
  live_bytes_ += delta;
  record_.memory.push_back({time_us, live_bytes_});
  record_.peak_activation_bytes = std::max(record_.peak_activation_bytes, live_bytes_);
}

}  // namespace optpipe::runtime
