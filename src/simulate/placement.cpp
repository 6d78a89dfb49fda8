// Placing ops: each as soon as its inputs and resource allow (shared channels first come, first
// served), or in time order gated by memory, the runtime's rule.
#include <queue>

#include "simulate/engine.h"

namespace optpipe::sim_detail {

double Sim::ready_time(const Op& op, int* missing) const {
  const int s = op.stage, mb = op.microbatch;
  const int dev = stage_device_[s];
  double ready = 0;  // time starts at 0
  auto after = [&](int dep, double latency_us) {
    if (std::isnan(ready)) return;
    if (!placed(dep)) {
      ready = kNaN;
      *missing = dep;
      return;
    }
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
      if (std::isnan(ready)) return kNaN;
      if (!placed(a)) {
        *missing = a;
        return kNaN;
      }
      ready = std::max(ready, start_[a]);
      break;
    }
  }
  return ready;
}

void Sim::place(int q, double start_us) {
  const int k = queues_[q].begin + queues_[q].head;
  const int i = queue_ops_[k];
  const double end_us = start_us + queue_dur_[k];
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

void Sim::wake_dependents(const Op& op, int placed) {
  const int s = op.stage;
  const int dev = stage_device_[s];
  switch (op.kind) {
    case OpKind::kF:
      if (s + 1 < S_) wake_for(compute_queue(stage_device_[s + 1]), placed);
      wake_for(d2h_queue(dev), placed);
      break;
    case OpKind::kB:
    case OpKind::kBW:
      if (s > 0) wake_for(compute_queue(stage_device_[s - 1]), placed);
      break;
    case OpKind::kOffload:
      wake_for(h2d_queue(dev), placed);
      wake_for(compute_queue(dev), placed);  // a Wait may be holding it
      break;
    case OpKind::kReload: wake_for(compute_queue(dev), placed); break;
    default: break;
  }
  if (is_compute(op.kind) && is_anchor_[placed]) wake_for(h2d_queue(dev), placed);
}

void Sim::advance(int q) {
  Queue& qu = queues_[q];
  while (qu.head < qu.end - qu.begin) {
    const int k = qu.begin + qu.head;
    const double ready = ready_time(queue_op_[k], &qu.waiting_for);
    if (std::isnan(ready)) return;
    qu.waiting_for = -1;
    if (qu.shared) {
      if (!(qu.candidate_ready_us == ready)) push_shared({std::max(ready, resource_free_us_[qu.resource]), ready, q});
      qu.candidate_ready_us = ready;
      return;
    }
    place(q, std::max(ready, resource_free_us_[qu.resource]));
    wake_dependents(queue_op_[k], queue_ops_[k]);
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
    const SharedHead now{std::max(qu.candidate_ready_us, resource_free_us_[qu.resource]), qu.candidate_ready_us,
                         top.queue};
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
  const int k = qu.begin + qu.head;
  qu.candidate_ready_us = kNaN;
  place(best, best_start);
  wake_dependents(queue_op_[k], queue_ops_[k]);
  wake(best);
  return true;
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
      int missing;
      const double ready = ready_time(queue_op_[qu.begin + qu.head], &missing);
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
    const int k = queues_[best].begin + queues_[best].head;
    const int i = queue_ops_[k];
    const Op op = queue_op_[k];
    const int64_t alloc = memory_delta(*p_, op, true, recomputed(op));
    if (alloc > 0 && bytes[d] + alloc > p_->devices[d].mem_budget_bytes) {
      room_at[best] = frees[d].empty() ? kNever : frees[d].top().first;
      continue;
    }
    room_at[best] = 0;
    place(best, best_start);
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

}  // namespace optpipe::sim_detail
