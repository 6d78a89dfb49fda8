// What the two CP models (Gecode's, CP-SAT's) share (private to src/exact): the problem's
// durations on an integer grid, and the schedule read back from a solution's start times.
#pragma once

#include <functional>
#include <vector>

#include "exact/by_start.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

// The model's numbers, on the integer grid: F, B and W and R durations and the hop round down
// (so a model without the budget bounds every schedule of the placement); transfers round up
// (so the read-back's waits are never too short) or, for a model whose bound must hold with the
// budget too, down: a schedule's start times floored onto such a grid keep every precedence and
// overlap no lifetimes that did not overlap.
struct Grid {
  std::vector<Op> ops;                // every F, B, W
  std::vector<int> index;             // op id → position in ops, −1 otherwise
  std::vector<int> dur;               // per op, in grid steps (rounded down)
  std::vector<int> r_dur;             // per stage: R, in grid steps (rounded down)
  std::vector<int> off_dur, rel_dur;  // per stage: offload and reload, in grid steps
  int hop = 0;                        // between stages on different devices, in grid steps (rounded down)
  int horizon = 0;                    // all work and hops in sequence: no schedule needs longer
  double unit_us = 1;
};

// `unit_us` 0: the coarsest 2^-k µs on which every duration and hop the model uses is exact
// (re-cut stages have halves), within 1e8 steps of the horizon; else as fine as 1e8 steps allow.
Grid make_grid(const Problem& p, bool recompute, bool offload, double unit_us, bool transfers_round_up);

struct ReadBack {
  Status status;  // Internal when the schedule does not simulate or its transfers overflow
  Schedule schedule;
  double objective_us = 0;  // its simulated makespan
};

// Each device's ops (F, B, W and the R's chosen) by their start times, the offloaded
// activations' transfers added (add_transfers_by_start) and settled in the simulator where it
// runs a reload earlier than the model did; then simulated. `model` names the model in messages.
ReadBack read_back(const Problem& p, const Grid& g, const std::vector<Op>& ops,
                   const std::function<double(const Op&)>& start, std::vector<TransferTimes> transfers,
                   const char* model);

}  // namespace optpipe
