// The simulator: derives every op's start and end from the schedule's per-resource orders, then
// each device's memory curve. Ops on a resource of their own are placed eagerly as soon as their
// inputs are known; transfers on a host link shared by several devices are placed one at a time,
// always the one that can start earliest, which makes the shared channel first come, first served.
#include "optpipe/simulate.h"

#include "optpipe/any_timing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

namespace optpipe {

namespace {

// Inlined into the simulator's memory loop; memory_delta() is the same for other callers.
inline int64_t delta_of(const Problem& p, const Op& op, bool at_start, bool recomputed) {
  const StageSpec& st = p.stages[op.stage];
  switch (op.kind) {
    case OpKind::kF:
      if (at_start) return st.act_f_bytes + st.ws_f_bytes;
      return -st.ws_f_bytes - (recomputed ? st.act_f_bytes - st.act_input_bytes : 0);
    case OpKind::kR:
      return at_start ? st.act_f_bytes - st.act_input_bytes + st.ws_f_bytes : -st.ws_f_bytes;
    case OpKind::kB: return at_start ? st.ws_b_bytes : st.act_b_bytes - st.ws_b_bytes;
    case OpKind::kW: return at_start ? st.ws_w_bytes : st.act_w_bytes - st.ws_w_bytes;
    case OpKind::kBW: {
      const int64_t ws = std::max(st.ws_b_bytes, st.ws_w_bytes);
      return at_start ? ws : st.act_b_bytes + st.act_w_bytes - ws;
    }
    case OpKind::kOffload: return at_start ? 0 : -st.act_f_bytes;
    case OpKind::kReload: return at_start ? st.act_f_bytes : 0;
    case OpKind::kWait: return 0;
  }
  return 0;
}

}  // namespace

int64_t memory_delta(const Problem& p, const Op& op, bool at_start, bool recomputed) {
  return delta_of(p, op, at_start, recomputed);
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Queue {
  int begin = 0, end = 0;  // range in Sim::queue_ops
  int head = 0;            // index of the next op to place
  int resource = 0;        // index into Sim::resource_free_us
  int device = 0;
  bool shared = false;      // resource serves several devices' queues
  bool in_worklist = false;
  double candidate_ready_us = kNaN;  // shared queues: ready time of a head waiting for its turn
};

class Sim {
 public:
  // Buffers keep their capacity from call to call: large fresh allocations cost page faults.
  SimResult run(const Problem& p, const Schedule& s, const SimOptions& options);

 private:
  Status build();
  double duration(const Op& op) const;
  double ready_time(int id) const;  // NaN while an input is not placed yet
  void place(int id, int q, double start_us);
  void wake(int q);
  void wake_dependents(const Op& op);
  void advance(int q);
  bool place_next_shared();
  void place_gated(bool* out_of_memory);
  bool recomputed(const Op& op) const { return op.kind == OpKind::kF && present_[id(OpKind::kR, op.stage, op.microbatch)]; }
  void compute_figures(const SimOptions& options, Timeline* t) const;

  int compute_queue(int device) const { return 3 * device; }
  int d2h_queue(int device) const { return 3 * device + 1; }
  int h2d_queue(int device) const { return 3 * device + 2; }
  int id(OpKind k, int stage, int mb) const { return op_id(S_, M_, Op{k, stage, mb}); }
  bool placed(int id) const { return !std::isnan(end_[id]); }
  // B(s,i) or, when the schedule fuses it, BW(s,i): the op that sends the gradient upstream.
  int grad_op(int stage, int mb) const {
    int b = id(OpKind::kB, stage, mb);
    return present_[b] ? b : id(OpKind::kBW, stage, mb);
  }

  const Problem* p_ = nullptr;
  const Schedule* s_ = nullptr;
  const std::vector<double>* factors_ = nullptr;
  int S_ = 0, M_ = 0, D_ = 0;
  std::vector<uint8_t> present_;
  std::vector<uint8_t> is_anchor_;  // by op id: a reload's anchor or `after`, so it wakes the reloads
  std::vector<int> anchor_of_;  // by stage·M + mb: the anchor op id of that reload
  std::vector<std::pair<int, int>> after_range_;  // by stage·M + mb: that reload's range in after_ids_
  std::vector<int> after_ids_;                    // the op ids reloads wait for, reload by reload
  std::vector<double> start_, end_;
  // Looked up, not recomputed, on the hot path: per op id its op and duration, per stage its device.
  std::vector<Op> op_of_;
  std::vector<double> dur_;
  std::vector<int> stage_device_;
  std::vector<int> queue_ops_;
  std::vector<Queue> queues_;
  std::vector<double> resource_free_us_;
  std::vector<int> worklist_;
  struct SharedHead {
    double start_us, ready_us;
    int queue;
    bool operator>(const SharedHead& o) const {
      if (start_us != o.start_us) return start_us > o.start_us;
      if (ready_us != o.ready_us) return ready_us > o.ready_us;
      return queue > o.queue;
    }
  };
  std::vector<SharedHead> shared_heads_;  // a min-heap (std::greater)
  void push_shared(const SharedHead& h) {
    shared_heads_.push_back(h);
    std::push_heap(shared_heads_.begin(), shared_heads_.end(), std::greater<>());
  }
  size_t num_placed_ = 0, num_ops_ = 0;
};

double Sim::duration(const Op& op) const { return op_duration_us(*p_, op); }

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
  start_.assign(n, kNaN);
  end_.assign(n, kNaN);
  op_of_.resize(n);
  dur_.resize(n);
  stage_device_.resize(S_);
  for (int st = 0; st < S_; st++) stage_device_[st] = p_->device_of(st);

  // Resources: one compute stream per device, then two channels per host link.
  int max_link = 0;
  for (const DeviceSpec& dev : p_->devices) max_link = std::max(max_link, dev.host_link);
  std::vector<int> devices_on_link(max_link + 1, 0);
  for (const DeviceSpec& dev : p_->devices) devices_on_link[dev.host_link]++;
  resource_free_us_.assign(D_ + 2 * (max_link + 1), 0.0);

  queues_.assign(3 * D_, Queue{});
  queue_ops_.clear();
  queue_ops_.reserve(s_->num_ops());
  auto add_op = [&](int d, const Op& op, OpKind want, const char* list) -> Status {
    bool kind_ok = want == OpKind::kF ? is_compute(op.kind) : op.kind == want;
    if (!kind_ok || op.stage < 0 || op.stage >= S_ || op.microbatch < 0 || op.microbatch >= M_)
      return Status::Invalid("device " + std::to_string(d) + " " + list + ": " + op_name(op) +
                             " is not a valid op for this list and problem");
    if (p_->device_of(op.stage) != d)
      return Status::Invalid("device " + std::to_string(d) + ": " + op_name(op) + " belongs to device " +
                             std::to_string(p_->device_of(op.stage)));
    int i = op_id(S_, M_, op);
    if (present_[i]) return Status::Invalid("device " + std::to_string(d) + ": " + op_name(op) + " appears twice");
    present_[i] = 1;
    op_of_[i] = op;
    dur_[i] = factors_ ? duration(op) * (*factors_)[i] : duration(op);
    queue_ops_.push_back(i);
    return Status::Ok();
  };
  for (int d = 0; d < D_; d++) {
    const DeviceSchedule& ds = s_->devices[d];
    const int link = p_->devices[d].host_link;
    const bool link_shared = devices_on_link[link] > 1;
    const int resources[3] = {d, D_ + 2 * link, D_ + 2 * link + 1};
    for (int k = 0; k < 3; k++) {
      Queue& q = queues_[3 * d + k];
      q.begin = static_cast<int>(queue_ops_.size());
      q.resource = resources[k];
      q.device = d;
      q.shared = k > 0 && link_shared;
      Status st;
      if (k == 0) {
        for (const Op& op : ds.compute)
          if (!(st = add_op(d, op, OpKind::kF, "compute")).ok()) return st;
      } else if (k == 1) {
        for (const Op& op : ds.offloads)
          if (!(st = add_op(d, op, OpKind::kOffload, "offloads")).ok()) return st;
      } else {
        for (const ReloadEntry& r : ds.reloads) {
          if (!(st = add_op(d, r.reload, OpKind::kReload, "reloads")).ok()) return st;
          const Op& a = r.anchor;
          if (!is_compute(a.kind) || a.stage < 0 || a.stage >= S_ || a.microbatch < 0 || a.microbatch >= M_)
            return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) +
                                   " has an invalid anchor " + op_name(a));
          if (p_->device_of(a.stage) != d)
            return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) +
                                   " is anchored to " + op_name(a) + " on another device");
          int a_id = op_id(S_, M_, a);
          anchor_of_[r.reload.stage * M_ + r.reload.microbatch] = a_id;
          const int after_begin = static_cast<int>(after_ids_.size());
          for (const Op& x : r.after) {
            if ((x.kind != OpKind::kOffload && !is_compute(x.kind)) || x.stage < 0 || x.stage >= S_ || x.microbatch < 0 ||
                x.microbatch >= M_ || p_->device_of(x.stage) != d)
              return Status::Invalid("device " + std::to_string(d) + ": reload " + op_name(r.reload) + " waits for " +
                                     op_name(x) + ", not a compute op or offload of this device");
            is_anchor_[op_id(S_, M_, x)] = 1;
            after_ids_.push_back(op_id(S_, M_, x));
          }
          after_range_[r.reload.stage * M_ + r.reload.microbatch] = {after_begin, static_cast<int>(after_ids_.size())};
          is_anchor_[a_id] = 1;
        }
      }
      q.end = static_cast<int>(queue_ops_.size());
    }
  }
  num_ops_ = queue_ops_.size();
  return Status::Ok();
}

double Sim::ready_time(int i) const {
  const Op op = op_of_[i];
  const int s = op.stage, mb = op.microbatch;
  const int dev = stage_device_[s];
  double ready = 0;  // time starts at 0
  auto after = [&](int dep, double latency_us) {
    if (std::isnan(ready)) return;
    if (!placed(dep)) { ready = kNaN; return; }
    ready = std::max(ready, end_[dep] + latency_us);
  };
  auto hop = [&](int other_stage) { return stage_device_[other_stage] == dev ? 0.0 : p_->t_comm_us; };
  switch (op.kind) {
    case OpKind::kF:
      if (s > 0) after(id(OpKind::kF, s - 1, mb), hop(s - 1));
      break;
    case OpKind::kB:
    case OpKind::kBW:
      after(id(OpKind::kF, s, mb), 0);
      if (s + 1 < S_) after(grad_op(s + 1, mb), hop(s + 1));
      if (present_[id(OpKind::kR, s, mb)]) after(id(OpKind::kR, s, mb), 0);
      if (present_[id(OpKind::kReload, s, mb)]) after(id(OpKind::kReload, s, mb), 0);
      break;
    case OpKind::kW: after(id(OpKind::kB, s, mb), 0); break;
    case OpKind::kR:
    case OpKind::kOffload: after(id(OpKind::kF, s, mb), 0); break;
    case OpKind::kWait: after(id(OpKind::kOffload, s, mb), 0); break;
    case OpKind::kReload: {
      after(id(OpKind::kOffload, s, mb), 0);
      const auto [after_begin, after_end] = after_range_[s * M_ + mb];
      for (int k = after_begin; k < after_end; k++) after(after_ids_[k], 0);
      int a = anchor_of_[s * M_ + mb];
      if (std::isnan(ready) || std::isnan(start_[a])) return kNaN;
      ready = std::max(ready, start_[a]);
      break;
    }
  }
  return ready;
}

void Sim::place(int i, int q, double start_us) {
  const double end_us = start_us + dur_[i];
  start_[i] = start_us;
  end_[i] = end_us;
  resource_free_us_[queues_[q].resource] = end_us;
  queues_[q].head++;
  num_placed_++;
}

void Sim::wake(int q) {
  if (!queues_[q].in_worklist) {
    queues_[q].in_worklist = true;
    worklist_.push_back(q);
  }
}

void Sim::wake_dependents(const Op& op) {
  const int s = op.stage;
  const int dev = stage_device_[s];
  switch (op.kind) {
    case OpKind::kF:
      if (s + 1 < S_) wake(compute_queue(stage_device_[s + 1]));
      wake(d2h_queue(dev));
      break;
    case OpKind::kB:
    case OpKind::kBW:
      if (s > 0) wake(compute_queue(stage_device_[s - 1]));
      break;
    case OpKind::kOffload:
      wake(h2d_queue(dev));
      wake(compute_queue(dev));  // a Wait may be holding it
      break;
    case OpKind::kReload: wake(compute_queue(dev)); break;
    default: break;
  }
  if (is_compute(op.kind) && is_anchor_[op_id(S_, M_, op)]) wake(h2d_queue(dev));
}

void Sim::advance(int q) {
  Queue& qu = queues_[q];
  while (qu.head < qu.end - qu.begin) {
    const int i = queue_ops_[qu.begin + qu.head];
    const double ready = ready_time(i);
    if (std::isnan(ready)) return;
    if (qu.shared) {
      if (!(qu.candidate_ready_us == ready)) push_shared({std::max(ready, resource_free_us_[qu.resource]), ready, q});
      qu.candidate_ready_us = ready;
      return;
    }
    place(i, q, std::max(ready, resource_free_us_[qu.resource]));
    wake_dependents(op_of_[i]);
  }
}

// The shared heads in a heap by (start, ready, queue). A key only grows (a channel's free time
// does), so an entry whose key is out of date goes back with the right one; the first that is up
// to date is the earliest head.
bool Sim::place_next_shared() {
  int best = -1;
  double best_start = 0;
  while (!shared_heads_.empty()) {
    std::pop_heap(shared_heads_.begin(), shared_heads_.end(), std::greater<>());
    const SharedHead top = shared_heads_.back();
    shared_heads_.pop_back();
    const Queue& qu = queues_[top.queue];
    if (std::isnan(qu.candidate_ready_us)) continue;  // placed since
    const SharedHead now{std::max(qu.candidate_ready_us, resource_free_us_[qu.resource]), qu.candidate_ready_us, top.queue};
    if (now.start_us != top.start_us || now.ready_us != top.ready_us) {
      push_shared(now);
      continue;
    }
    best = top.queue;
    best_start = top.start_us;
    break;
  }
  if (best < 0) return false;
  Queue& qu = queues_[best];
  const int i = queue_ops_[qu.begin + qu.head];
  qu.candidate_ready_us = kNaN;
  place(i, best, best_start);
  wake_dependents(op_of_[i]);
  wake(best);
  return true;
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
    std::string msg = r.out_of_memory ? "stuck: no free can make room; blocked:" : "deadlock: no op can start; blocked:";
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

// The runtime's rule: ops start in time order, each as soon as its resource and inputs allow and,
// if it allocates, once its device's frees have made room within the budget. A scan over the
// queue heads picks the next start (ties as on a shared channel: earlier ready, then lower
// queue), so with room to spare this places every op exactly where the plain loop does.
void Sim::place_gated(bool* out_of_memory) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  using Free = std::pair<double, int64_t>;  // (time, bytes freed, ≤ 0)
  std::vector<std::priority_queue<Free, std::vector<Free>, std::greater<>>> frees(D_);
  std::vector<int64_t> bytes(D_);
  for (int d = 0; d < D_; d++) bytes[d] = p_->devices[d].static_bytes;
  std::vector<double> room_at(queues_.size(), 0);  // a blocked head's next chance: its device's next free
  for (;;) {
    int best = -1;
    double best_start = 0, best_ready = 0;
    for (int q = 0; q < static_cast<int>(queues_.size()); q++) {
      const Queue& qu = queues_[q];
      if (qu.head == qu.end - qu.begin) continue;
      const double ready = ready_time(queue_ops_[qu.begin + qu.head]);
      if (std::isnan(ready)) continue;
      const double start = std::max({ready, resource_free_us_[qu.resource], room_at[q]});
      if (start == kNever) continue;
      if (best < 0 || start < best_start || (start == best_start && ready < best_ready)) {
        best = q;
        best_start = start;
        best_ready = ready;
      }
    }
    if (best < 0) break;
    const int d = queues_[best].device;
    while (!frees[d].empty() && frees[d].top().first <= best_start) {
      bytes[d] += frees[d].top().second;
      frees[d].pop();
    }
    const int i = queue_ops_[queues_[best].begin + queues_[best].head];
    const Op op = op_of_[i];
    const int64_t alloc = memory_delta(*p_, op, true, recomputed(op));
    if (alloc > 0 && bytes[d] + alloc > p_->devices[d].mem_budget_bytes) {
      room_at[best] = frees[d].empty() ? kNever : frees[d].top().first;
      continue;
    }
    room_at[best] = 0;
    place(i, best, best_start);
    bytes[d] += alloc;
    if (const int64_t freed = memory_delta(*p_, op, false, recomputed(op)); freed != 0) {
      frees[d].push({end_[i], freed});
      for (int k = 0; k < 3; k++) {  // a head waiting for room may start when this ends
        double& at = room_at[3 * d + k];
        if (at > end_[i]) at = end_[i];
      }
    }
  }
  *out_of_memory = std::find(room_at.begin(), room_at.end(), kNever) != room_at.end();
}

void Sim::compute_figures(const SimOptions& options, Timeline* t) const {
  t->devices.assign(D_, DeviceFigures{});
  if (options.memory_curve) t->memory.assign(D_, {});
  double makespan = 0, total_busy = 0, max_span = 0;
  for (int d = 0; d < D_; d++) {
    DeviceFigures& f = t->devices[d];
    const Queue& cq = queues_[compute_queue(d)];
    const Queue& oq = queues_[d2h_queue(d)];
    const Queue& rq = queues_[h2d_queue(d)];
    f.first_start_us = cq.end > cq.begin ? start_[queue_ops_[cq.begin]] : 0;
    f.last_end_us = cq.end > cq.begin ? end_[queue_ops_[cq.end - 1]] : 0;
    for (int k = cq.begin; k < cq.end; k++) {
      const int i = queue_ops_[k];
      f.busy_us += end_[i] - start_[i];
      f.first_start_us = std::min(f.first_start_us, start_[i]);
      f.last_end_us = std::max(f.last_end_us, end_[i]);
      if (op_of_[i].kind == OpKind::kR) f.num_recomputes++;
    }
    for (int k = oq.begin; k < oq.end; k++) {
      const int i = queue_ops_[k];
      f.d2h_busy_us += end_[i] - start_[i];
      f.offload_bytes += p_->stages[op_of_[i].stage].act_f_bytes;
      f.last_end_us = std::max(f.last_end_us, end_[i]);
    }
    for (int k = rq.begin; k < rq.end; k++) {
      const int i = queue_ops_[k];
      f.h2d_busy_us += end_[i] - start_[i];
      f.reload_bytes += p_->stages[op_of_[i].stage].act_f_bytes;
      f.last_end_us = std::max(f.last_end_us, end_[i]);
    }
    makespan = std::max(makespan, f.last_end_us);
    total_busy += f.busy_us;
    max_span = std::max(max_span, f.last_end_us - f.first_start_us);

    // Memory: merge the three time-ordered event streams (compute starts/ends, offload ends,
    // reload starts). At equal times an end comes before a start, so freed bytes are reused.
    int64_t bytes = p_->devices[d].static_bytes;
    f.peak_bytes = bytes;
    f.peak_time_us = 0;
    std::vector<MemoryPoint>* curve = options.memory_curve ? &t->memory[d] : nullptr;
    if (curve) curve->push_back({0, bytes});
    int ci = 0;              // compute event index: op (ci / 2), start if even
    int oi = oq.begin, ri = rq.begin;
    const int n_compute_events = 2 * (cq.end - cq.begin);
    for (;;) {
      double best_t = std::numeric_limits<double>::infinity();
      int which = -1;  // 0 compute, 1 offload end, 2 reload start
      bool best_is_start = true;
      auto consider = [&](int stream, double time, bool is_start) {
        if (time < best_t || (time == best_t && best_is_start && !is_start)) {
          best_t = time;
          which = stream;
          best_is_start = is_start;
        }
      };
      if (ci < n_compute_events) {
        const int i = queue_ops_[cq.begin + ci / 2];
        consider(0, ci % 2 == 0 ? start_[i] : end_[i], ci % 2 == 0);
      }
      if (oi < oq.end) consider(1, end_[queue_ops_[oi]], false);
      if (ri < rq.end) consider(2, start_[queue_ops_[ri]], true);
      if (which < 0) break;
      int i;
      bool at_start;
      if (which == 0) {
        i = queue_ops_[cq.begin + ci / 2];
        at_start = ci % 2 == 0;
        ci++;
      } else if (which == 1) {
        i = queue_ops_[oi++];
        at_start = false;
      } else {
        i = queue_ops_[ri++];
        at_start = true;
      }
      const Op op = op_of_[i];
      bytes += delta_of(*p_, op, at_start, recomputed(op));
      if (bytes > f.peak_bytes) {
        f.peak_bytes = bytes;
        f.peak_time_us = best_t;
        f.peak_op = op;
      }
      if (curve) {
        if (!curve->empty() && curve->back().time_us == best_t)
          curve->back().bytes = bytes;
        else
          curve->push_back({best_t, bytes});
      }
    }
  }
  t->idle_us = 0;
  for (DeviceFigures& f : t->devices) {
    f.idle_us = makespan - f.busy_us;
    t->idle_us += f.idle_us;
  }
  t->makespan_us = makespan;
  t->max_span_us = max_span;
  t->bubble_ratio = makespan > 0 ? 1.0 - total_busy / (D_ * makespan) : 0.0;
}

}  // namespace

SimResult simulate(const Problem& p, const Schedule& s, const SimOptions& options) {
  thread_local Sim sim;
  return sim.run(p, s, options);
}

}  // namespace optpipe
