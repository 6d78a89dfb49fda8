// The simulator: derives every op's start and end from the schedule's per-resource orders, then
// each device's memory curve. Ops on a resource of their own are placed eagerly as soon as their
// inputs are known; transfers on a host link shared by several devices are placed one at a time,
// always the one that can start earliest, which makes the shared channel first come, first served.
#include "optpipe/simulate.h"

#include "optpipe/any_timing.h"
#include "simulate/engine.h"

namespace optpipe {

int64_t memory_delta(const Problem& p, const Op& op, bool at_start, bool recomputed) {
  return sim_detail::delta_of(p, op, at_start, recomputed);
}

namespace sim_detail {

// Once per op: the checks, then the bookkeeping; the message is made out of line.
[[gnu::always_inline]] inline bool Sim::add_op(int d, const Op& op, OpKind want, const char* list) {
  if (!fits_list(op, want) || stage_device_[op.stage] != d || present_[op_id(S_, M_, op)]) {
    bad_op(d, op, want, list);
    return false;
  }
  const int i = op_id(S_, M_, op);
  present_[i] = 1;
  queue_ops_[num_ops_] = i;
  queue_op_[num_ops_] = op;
  const int at = stage_at(op);
  queue_dur_[num_ops_] = factors_ ? stage_dur_[at] * (*factors_)[i] : stage_dur_[at];
  queue_delta_[2 * num_ops_] = stage_delta_[3 * at];
  queue_delta_[2 * num_ops_ + 1] = stage_delta_[3 * at + 1];
  num_ops_++;
  return true;
}

Status Sim::build() {
  S_ = p_->num_stages();
  M_ = p_->num_microbatches;
  D_ = p_->num_devices;
  if (static_cast<int>(s_->devices.size()) != D_)
    return Status::Invalid("schedule has " + std::to_string(s_->devices.size()) + " devices, problem has " +
                           std::to_string(D_));
  const int n = num_op_ids(*p_);
  present_.assign(n, 0);
  is_anchor_.assign(n, 0);
  anchor_of_.assign(static_cast<size_t>(S_) * M_, -1);
  after_range_.assign(static_cast<size_t>(S_) * M_, {0, 0});
  after_ids_.clear();
  // Whether an op is placed is read from end_ alone; start_ is only read for placed ops, so it is
  // cleared only when the caller takes the op times (absent ops then read NaN).
  start_.resize(n);
  end_.assign(n, kNaN);
  stage_device_.resize(S_);
  for (int st = 0; st < S_; st++) stage_device_[st] = p_->device_of(st);
  stage_dur_.resize(static_cast<size_t>(kNumOpKinds) * S_);
  stage_delta_.resize(3 * stage_dur_.size());
  for (int k = 0; k < kNumOpKinds; k++)
    for (int st = 0; st < S_; st++) {
      const Op op{static_cast<OpKind>(k), st, 0};
      const int at = k * S_ + st;
      stage_dur_[at] = op_duration_us(*p_, op);
      stage_delta_[3 * at] = delta_of(*p_, op, true, false);
      stage_delta_[3 * at + 1] = delta_of(*p_, op, false, false);
      stage_delta_[3 * at + 2] = delta_of(*p_, op, false, true);
    }

  // Resources: one compute stream per device, then two channels per host link.
  int max_link = 0;
  for (const DeviceSpec& dev : p_->devices) max_link = std::max(max_link, dev.host_link);
  std::vector<int> devices_on_link(max_link + 1, 0);
  for (const DeviceSpec& dev : p_->devices) devices_on_link[dev.host_link]++;
  resource_free_us_.assign(D_ + 2 * (max_link + 1), 0.0);

  queues_.assign(3 * D_, Queue{});
  // Sized once and written by index: a push_back per op was a fifth of a simulation's build.
  num_ops_ = 0;
  queue_ops_.resize(s_->num_ops());
  queue_op_.resize(s_->num_ops());
  queue_dur_.resize(s_->num_ops());
  queue_delta_.resize(2 * s_->num_ops());
  bool recomputes = false;
  for (int d = 0; d < D_; d++) {
    const DeviceSchedule& ds = s_->devices[d];
    const int link = p_->devices[d].host_link;
    const bool link_shared = devices_on_link[link] > 1;
    const int resources[3] = {d, D_ + 2 * link, D_ + 2 * link + 1};
    for (int k = 0; k < 3; k++) {
      Queue& q = queues_[3 * d + k];
      q.begin = static_cast<int>(num_ops_);
      q.resource = resources[k];
      q.device = d;
      q.shared = k > 0 && link_shared;
      Status st;
      if (k == 0) {
        for (const Op& op : ds.compute) {
          if (!add_op(d, op, OpKind::kF, "compute")) return error_;
          recomputes = recomputes || op.kind == OpKind::kR;
        }
      } else if (k == 1) {
        for (const Op& op : ds.offloads)
          if (!add_op(d, op, OpKind::kOffload, "offloads")) return error_;
      } else {
        for (const ReloadEntry& r : ds.reloads)
          if (!(st = add_reload(d, r)).ok()) return st;
      }
      q.end = static_cast<int>(num_ops_);
    }
  }
  // A recomputed F frees its activation at its end (but its input): known once every R is in.
  for (int d = 0; d < D_ && recomputes; d++) {
    const Queue& q = queues_[compute_queue(d)];
    for (int k = q.begin; k < q.end; k++)
      if (recomputed(queue_op_[k])) queue_delta_[2 * k + 1] = delta(queue_op_[k], false, true);
  }
  return Status::Ok();
}

void Sim::bad_op(int d, const Op& op, OpKind want, const char* list) {
  if (!fits_list(op, want))
    error_ = Status::Invalid("device " + std::to_string(d) + " " + list + ": " + op_name(op) +
                             " is not a valid op for this list and problem");
  else if (stage_device_[op.stage] != d)
    error_ = Status::Invalid("device " + std::to_string(d) + ": " + op_name(op) + " belongs to device " +
                             std::to_string(stage_device_[op.stage]));
  else
    error_ = Status::Invalid("device " + std::to_string(d) + ": " + op_name(op) + " appears twice");
}

// A reload, its anchor and the ops it waits for, each checked to be a compute op (or for `after`,
// an offload) of device d.
Status Sim::add_reload(int d, const ReloadEntry& r) {
  if (!add_op(d, r.reload, OpKind::kReload, "reloads")) return error_;
  const Op& a = r.anchor;
  if (!fits_list(a, OpKind::kF))
    return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) + " has an invalid anchor " +
                           op_name(a));
  if (stage_device_[a.stage] != d)
    return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) + " is anchored to " +
                           op_name(a) + " on another device");
  int a_id = op_id(S_, M_, a);
  anchor_of_[r.reload.stage * M_ + r.reload.microbatch] = a_id;
  const int after_begin = static_cast<int>(after_ids_.size());
  for (const Op& x : r.after) {
    if (!(fits_list(x, OpKind::kF) || fits_list(x, OpKind::kOffload)) || stage_device_[x.stage] != d)
      return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) + " waits for " +
                             op_name(x) + ", not a compute op or offload of this device");
    is_anchor_[op_id(S_, M_, x)] = 1;
    after_ids_.push_back(op_id(S_, M_, x));
  }
  after_range_[r.reload.stage * M_ + r.reload.microbatch] = {after_begin, static_cast<int>(after_ids_.size())};
  is_anchor_[a_id] = 1;
  return Status::Ok();
}

SimResult Sim::run(const Problem& p, const Schedule& s, const SimOptions& options) {
  p_ = &p;
  s_ = &s;
  factors_ = options.duration_factors;
  if (factors_ && factors_->size() != static_cast<size_t>(num_op_ids(p))) {
    SimResult bad;
    bad.status = Status::Invalid("duration factors: " + std::to_string(factors_->size()) + " given, " +
                                 std::to_string(num_op_ids(p)) + " op ids");
    return bad;
  }
  worklist_.clear();
  shared_heads_.clear();
  num_placed_ = 0;
  SimResult r;
  r.status = build();
  if (!r.status.ok()) return r;
  if (options.op_times) std::fill(start_.begin(), start_.end(), kNaN);

  if (options.gate_memory) {
    place_gated(&r.out_of_memory);
  } else {
    for (int q = 0; q < static_cast<int>(queues_.size()); q++) wake(q);
    for (;;) {
      while (!worklist_.empty()) {
        const int q = worklist_.back();
        worklist_.pop_back();
        queues_[q].in_worklist = false;
        advance(q);
      }
      if (num_placed_ == num_ops_ || !place_next_shared()) break;
    }
  }

  if (num_placed_ != num_ops_) {
    std::string msg =
        r.out_of_memory ? "stuck: no free can make room; blocked:" : "deadlock: no op can start; blocked:";
    for (const Queue& qu : queues_) {
      if (qu.head == qu.end - qu.begin) continue;
      Op op = op_from_id(*p_, queue_ops_[qu.begin + qu.head]);
      r.stuck.push_back(op);
      msg += " device " + std::to_string(qu.device) + " waits to run " + op_name(op) + ";";
    }
    msg.pop_back();
    r.status = Status::Invalid(msg);
    return r;
  }
  compute_figures(options, &r.timeline);
  if (options.any_timing) {
    Result<std::vector<WorstCase>> worst = worst_case_peaks(p, s);
    if (!worst.ok()) {
      r.status = worst.status;
      return r;
    }
    for (int d = 0; d < D_; d++) {
      r.timeline.devices[d].worst_peak_bytes = worst.value[d].peak_bytes;
      r.timeline.devices[d].worst_peak_op = worst.value[d].during;
    }
  }
  if (options.op_times) {
    r.timeline.start_us = start_;
    r.timeline.end_us = end_;
  }
  return r;
}

}  // namespace sim_detail

SimResult simulate(const Problem& p, const Schedule& s, const SimOptions& options) {
  thread_local sim_detail::Sim sim;
  return sim.run(p, s, options);
}

}  // namespace optpipe
