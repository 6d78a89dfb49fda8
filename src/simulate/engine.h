// The simulator's engine (private to src/simulate): one object per thread, its buffers kept from
// call to call. simulate.cpp builds the queues and runs it, placement.cpp places ops (eagerly,
// shared channels first come first served, or gated by memory), figures.cpp derives the
// timeline's figures and memory curves.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "optpipe/simulate.h"

namespace optpipe::sim_detail {

// Inlined into the simulator's memory loop; memory_delta() is the same for other callers.
inline int64_t delta_of(const Problem& p, const Op& op, bool at_start, bool recomputed) {
  const StageSpec& st = p.stages[op.stage];
  switch (op.kind) {
    case OpKind::kF:
      if (at_start) return st.act_f_bytes + st.ws_f_bytes;
      return -st.ws_f_bytes - (recomputed ? st.act_f_bytes - st.act_input_bytes : 0);
    case OpKind::kR: return at_start ? st.act_f_bytes - st.act_input_bytes + st.ws_f_bytes : -st.ws_f_bytes;
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Queue {
  int begin = 0, end = 0;  // range in Sim::queue_ops
  int head = 0;            // index of the next op to place
  int resource = 0;        // index into Sim::resource_free_us
  int device = 0;
  bool shared = false;  // resource serves several devices' queues
  bool in_worklist = false;
  int waiting_for = -1;              // the op id its head last found unplaced (−1: none)
  double candidate_ready_us = kNaN;  // shared queues: ready time of a head waiting for its turn
};

class Sim {
 public:
  // Buffers keep their capacity from call to call: large fresh allocations cost page faults.
  SimResult run(const Problem& p, const Schedule& s, const SimOptions& options);

 private:
  Status build();
  bool add_op(int d, const Op& op, OpKind want, const char* list);  // false: the reason in error_
  void bad_op(int d, const Op& op, OpKind want, const char* list);
  // The kind the list takes (want kF: any compute op), its stage and microbatch in range.
  bool fits_list(const Op& op, OpKind want) const {
    return (want == OpKind::kF ? is_compute(op.kind) : op.kind == want) && op.stage >= 0 && op.stage < S_ &&
           op.microbatch >= 0 && op.microbatch < M_;
  }
  Status add_reload(int d, const ReloadEntry& r);
  // Per stage and kind (stage_dur_, stage_delta_ by this index), looked up when the queues are
  // built: duration, and the bytes an op allocates at its start and frees at its end (for F, [2]
  // is the end when the stage's R follows).
  int stage_at(const Op& op) const { return static_cast<int>(op.kind) * S_ + op.stage; }
  int64_t delta(const Op& op, bool at_start, bool recomputed) const {
    const int64_t* d = &stage_delta_[3 * stage_at(op)];
    return at_start ? d[0] : recomputed ? d[2] : d[1];
  }
  // The hot path's three, inlined into advance() and the placing loops (all in placement.cpp,
  // the only file that calls them). Measured: 1.08–1.15× the ops/s of zb-h1, zb-v and
  // interleaved at D = 32, M = 256, 1.03–1.25× pipeoffload's, two runs side by side
  // (bench/results/2026-12-03-simulator-inline.txt).
  // NaN while an input is not placed yet, and that input's id in *missing.
  [[gnu::always_inline]] inline double ready_time(const Op& op, int* missing) const;
  [[gnu::always_inline]] inline void place(int q, double start_us);  // the queue's head
  void wake(int q);
  // Wakes a queue whose head may depend on op `placed` (not one known to wait for another op).
  void wake_for(int q, int placed) {
    if (queues_[q].waiting_for < 0 || queues_[q].waiting_for == placed) wake(q);
  }
  [[gnu::always_inline]] inline void wake_dependents(const Op& op, int placed);
  void advance(int q);
  bool place_next_shared();
  void place_gated(bool* out_of_memory);
  bool recomputed(const Op& op) const {
    return op.kind == OpKind::kF && present_[id(OpKind::kR, op.stage, op.microbatch)];
  }
  void compute_figures(const SimOptions& options, Timeline* t) const;
  void device_times(int d, DeviceFigures* f) const;
  void memory_sweep(int d, DeviceFigures* f, std::vector<MemoryPoint>* curve) const;

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

  Status error_;
  const Problem* p_ = nullptr;
  const Schedule* s_ = nullptr;
  const std::vector<double>* factors_ = nullptr;
  int S_ = 0, M_ = 0, D_ = 0;
  std::vector<uint8_t> present_;
  std::vector<uint8_t> is_anchor_;                // by op id: a reload's anchor or `after`, so it wakes the reloads
  std::vector<int> anchor_of_;                    // by stage·M + mb: the anchor op id of that reload
  std::vector<std::pair<int, int>> after_range_;  // by stage·M + mb: that reload's range in after_ids_
  std::vector<int> after_ids_;                    // the op ids reloads wait for, reload by reload
  std::vector<double> start_, end_;
  // Looked up, not recomputed, on the hot path: in queue order (as queue_ops_) each op and its
  // duration, read in that order; per stage its device.
  std::vector<Op> queue_op_;
  std::vector<double> queue_dur_;
  // In queue order, each op's memory change at its start [2k] and end [2k + 1] (an F's end as
  // recomputed when the schedule recomputes it): the memory sweep reads them in that order.
  std::vector<int64_t> queue_delta_;
  std::vector<int> stage_device_;
  std::vector<double> stage_dur_;     // by kind·S + stage
  std::vector<int64_t> stage_delta_;  // by 3·(kind·S + stage): start, end, end when recomputed
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

}  // namespace optpipe::sim_detail
