// The timeline's figures from placed ops: per device its busy and idle time, span, transfers and
// recomputes, and its memory (peak, and with memory_curve the whole curve).
#include "simulate/engine.h"

namespace optpipe::sim_detail {

void Sim::compute_figures(const SimOptions& options, Timeline* t) const {
  t->devices.assign(D_, DeviceFigures{});
  if (options.memory_curve) t->memory.assign(D_, {});
  double makespan = 0, total_busy = 0, max_span = 0;
  for (int d = 0; d < D_; d++) {
    DeviceFigures& f = t->devices[d];
    device_times(d, &f);
    memory_sweep(d, &f, options.memory_curve ? &t->memory[d] : nullptr);
    makespan = std::max(makespan, f.last_end_us);
    total_busy += f.busy_us;
    max_span = std::max(max_span, f.last_end_us - f.first_start_us);
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

// The transfers' figures; the compute stream's are taken in memory_sweep's pass over it.
void Sim::device_times(int d, DeviceFigures* f) const {
  const Queue& oq = queues_[d2h_queue(d)];
  const Queue& rq = queues_[h2d_queue(d)];
  for (int k = oq.begin; k < oq.end; k++) {
    const int i = queue_ops_[k];
    f->d2h_busy_us += end_[i] - start_[i];
    f->offload_bytes += p_->stages[queue_op_[k].stage].act_f_bytes;
    f->last_end_us = std::max(f->last_end_us, end_[i]);
  }
  for (int k = rq.begin; k < rq.end; k++) {
    const int i = queue_ops_[k];
    f->h2d_busy_us += end_[i] - start_[i];
    f->reload_bytes += p_->stages[queue_op_[k].stage].act_f_bytes;
    f->last_end_us = std::max(f->last_end_us, end_[i]);
  }
}

// Merges the three time-ordered event streams (compute starts/ends, offload ends, reload starts).
// At equal times an end comes before a start, so freed bytes are reused; among starts (or among
// ends) compute comes first, then offloads, then reloads.
void Sim::memory_sweep(int d, DeviceFigures* f, std::vector<MemoryPoint>* curve) const {
  const Queue& cq = queues_[compute_queue(d)];
  const Queue& oq = queues_[d2h_queue(d)];
  const Queue& rq = queues_[h2d_queue(d)];
  int64_t bytes = p_->devices[d].static_bytes;
  // The peak kept in locals, written once at the end: every event reads and may write it.
  int64_t peak_bytes = bytes;
  double peak_time_us = 0;
  Op peak_op = f->peak_op;
  if (curve) curve->push_back({0, bytes});
  int peak_k = -1;                                    // the queue position of the peak's op
  auto event = [&](int k, bool at_start, double t) {  // k: a queue position
    bytes += queue_delta_[2 * k + (at_start ? 0 : 1)];
    if (bytes > peak_bytes) {
      peak_bytes = bytes;
      peak_time_us = t;
      peak_k = k;
    }
    if (curve) {
      if (!curve->empty() && curve->back().time_us == t)
        curve->back().bytes = bytes;
      else
        curve->push_back({t, bytes});
    }
  };
  // The transfer events before a compute event at t: offload ends before it (at t too when it is
  // a start) and reload starts before it, the two merged. The next of each is kept at hand
  // (infinite when none is left).
  constexpr double kNever = std::numeric_limits<double>::infinity();
  int oi = oq.begin, ri = rq.begin;
  double o = oi < oq.end ? end_[queue_ops_[oi]] : kNever, r = ri < rq.end ? start_[queue_ops_[ri]] : kNever;
  auto transfers_before = [&](double t, bool compute_starts) {
    for (;;) {
      if (oi < oq.end && o <= r && (o < t || (compute_starts && o == t))) {
        event(oi++, false, o);
        o = oi < oq.end ? end_[queue_ops_[oi]] : kNever;
      } else if (ri < rq.end && r < o && r < t) {
        event(ri++, true, r);
        r = ri < rq.end ? start_[queue_ops_[ri]] : kNever;
      } else {
        return;
      }
    }
  };
  // The compute stream's times, in the same pass (locals, written once at the end).
  double busy_us = 0, first_start_us = cq.end > cq.begin ? start_[queue_ops_[cq.begin]] : 0;
  double last_end_us = cq.end > cq.begin ? end_[queue_ops_[cq.end - 1]] : 0;
  int num_recomputes = 0;
  for (int k = cq.begin; k < cq.end; k++) {
    const int i = queue_ops_[k];
    const double start = start_[i], end = end_[i];
    busy_us += end - start;
    first_start_us = std::min(first_start_us, start);
    last_end_us = std::max(last_end_us, end);
    num_recomputes += queue_op_[k].kind == OpKind::kR;
    transfers_before(start, true);
    event(k, true, start);
    transfers_before(end, false);
    event(k, false, end);
  }
  transfers_before(kNever, true);
  f->busy_us = busy_us;
  f->first_start_us = first_start_us;
  f->last_end_us = std::max(f->last_end_us, last_end_us);
  f->num_recomputes = num_recomputes;
  f->peak_bytes = peak_bytes;
  f->peak_time_us = peak_time_us;
  f->peak_op = peak_k >= 0 ? queue_op_[peak_k] : peak_op;
}

}  // namespace optpipe::sim_detail
