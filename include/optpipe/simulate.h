// simulate.h — the one authority on time and memory.
//
// Every op starts as soon as its resource is free and its inputs are ready, in the order the
// schedule gives per resource. Resources: each device's compute stream, and each host link's
// device-to-host and host-to-device channels (one transfer at a time per direction; a link
// shared by several devices serves their transfers first come, first served, ties to the lower
// device). Inputs:
//   F(s,i)       after F(s−1,i)                 (+ t_comm_us if on another device)
//   B/BW(s,i)    after F(s,i), after B/BW(s+1,i) (+ t_comm_us), after R(s,i) / Reload(s,i) if any
//   W(s,i)       after B(s,i)
//   R(s,i)       after F(s,i)
//   Offload(s,i) after F(s,i);  Reload(s,i) after Offload(s,i) (and the op it waits for, if any)
//                and not before its anchor starts
//   Wait(s,i)    after Offload(s,i); it takes no time and changes no memory
// Memory per device: static bytes, plus activation deltas (allocations when an op starts, frees
// when it ends; at equal times frees come first), plus workspace while an op runs.
//
//   SimResult r = simulate(problem, schedule);
//   if (r.ok()) printf("%f us, bubble %.1f%%\n", r.timeline.makespan_us, 100 * r.timeline.bubble_ratio);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct MemoryPoint {
  double time_us;
  int64_t bytes;  // static + live activations + workspace, from this time on
};

struct DeviceFigures {
  double busy_us = 0;            // compute-stream time in use
  double first_start_us = 0;     // first op start
  double last_end_us = 0;        // last op end
  double idle_us = 0;            // makespan − busy
  int64_t peak_bytes = 0;        // peak of static + activations + workspace
  int64_t worst_peak_bytes = 0;  // the same peak under the worst timing the schedule allows
                                 // (any_timing.h); filled with SimOptions::any_timing
  Op worst_peak_op;              // the compute op running at that worst moment
  double peak_time_us = 0;       // when the peak is first reached
  Op peak_op;                    // the op whose allocation reaches the peak
  int64_t offload_bytes = 0;     // moved to the host
  int64_t reload_bytes = 0;      // moved back
  double d2h_busy_us = 0;        // this device's transfers on its device-to-host channel
  double h2d_busy_us = 0;
  int num_recomputes = 0;
};

struct Timeline {
  std::vector<double> start_us;  // by op_id; NaN for ops the schedule does not contain (empty
                                 // unless SimOptions::op_times)
  std::vector<double> end_us;
  std::vector<DeviceFigures> devices;
  double makespan_us = 0;                        // end of the last op anywhere
  double max_span_us = 0;                        // longest per-device span (steady-state period)
  double bubble_ratio = 0;                       // 1 − Σ busy / (D · makespan)
  double idle_us = 0;                            // Σ over devices of makespan − busy
  std::vector<std::vector<MemoryPoint>> memory;  // per device, only with SimOptions::memory_curve
};

struct SimOptions {
  bool op_times = true;       // fill Timeline::start_us / end_us (off: only the figures)
  bool memory_curve = false;  // also record every step of each device's memory curve
  bool any_timing = true;     // also the worst-case peaks over every timing (any_timing.h)
  // By op id: each op's duration is the problem's times this factor (noise.h draws them).
  // Null: the problem's durations.
  const std::vector<double>* duration_factors = nullptr;
  // The runtime's rule: an allocation that would pass the device's budget waits until frees make
  // room (off: every op starts as soon as its inputs and resource allow, whatever the memory).
  bool gate_memory = false;
};

struct [[nodiscard]] SimResult {
  Status status;               // InvalidInput when the schedule deadlocks or names an op twice / out of range
  Timeline timeline;           // complete only when status is ok
  std::vector<Op> stuck;       // on deadlock: the op each blocked resource waits to run
  bool out_of_memory = false;  // with gate_memory: stuck waiting for room that nothing can free

  bool ok() const { return status.ok(); }
};

// Memory change of `op` on its own device when it starts (`at_start`) or ends; `recomputed`: the
// schedule recomputes this forward's activation, so F keeps only its input.
int64_t memory_delta(const Problem& p, const Op& op, bool at_start, bool recomputed);

// p must satisfy check_problem() (not re-checked here: this is the search's hot path; validate()
// checks it).
SimResult simulate(const Problem& p, const Schedule& s, const SimOptions& options = {});

// Every device's peak within its budget: at the nominal timings (peak_bytes), and under every
// timing that respects the schedule's orders (worst_peak_bytes, any_timing.h; needs
// SimOptions::any_timing).
bool fits_budget(const Problem& p, const Timeline& t);
bool fits_any_timing(const Problem& p, const Timeline& t);

// What a schedule is judged by: the makespan (first start to last end over all devices), or the
// longest per-device span (a device's first op start to its last op end: the steady-state period
// when iterations overlap, the zero-bubble paper's "cost").
enum class Objective { kMakespan, kSpan };
const char* objective_name(Objective o);  // "makespan", "span"
bool parse_objective(const std::string& name, Objective* out);
double objective_us(const Timeline& t, Objective o);
// The largest device peak (static + activations + workspace).
int64_t max_peak(const Timeline& t);

}  // namespace optpipe
