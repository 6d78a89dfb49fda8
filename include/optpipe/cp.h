// cp.h — a constraint-programming model of the same problem, solved with Gecode.
//
// Start times on an integer grid; a unary resource per device for its F, B and W; precedences as
// in the simulator; memory as a cumulative resource over activation lifetimes (F's start to B's
// end for what B frees, to W's end for what W frees); minimize the makespan by branch and bound
// over start times. Durations are rounded down to the grid and memory heights up to whole MiB,
// so with `memory = false` the proven optimum is a lower bound for every schedule of the
// placement (offloads and recomputes included), and with `memory = true` every solution truly
// fits its activations (workspace is not modelled: the optimizer simulates every solution). With `recompute` (and
// memory), an optional R per stage-microbatch on the device's unary resource, anywhere between its F and its B, and the
// lifetimes split around it. With `offload` (and memory), an optional offload and reload per stage-microbatch on the
// unary channels of the device's host link (shared with the devices on the same link), durations rounded up: the
// activation lives from F's start to the offload's end and again from the reload's start; B
// waits for the reload. The schedule read back holds a device's compute stream with WAIT ops
// where the model started an F or R after an offload ended, anchors each reload to the compute
// op started before it and holds it `after` the offload that ended last before it, and is
// simulated: where the simulator, starting everything as early as it can, still runs a reload
// ahead of a free the model had before it, the reload is held for the offload in flight or issued
// later (settle_transfers in by_start.h). A solution that still overflows is reported as not ok.
// Like the MILP: B and W separate, first in first out per stage.
//
//   CpSolution s = solve_cp(problem, {.memory = false, .time_limit_s = 5});
//   if (s.proven_optimal) bound = s.bound_us;
#pragma once

#include <cstdint>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct CpOptions {
  bool memory = true;
  double time_limit_s = 10;
  // Search nodes at most (0: no limit): deterministic, unlike the time limit; tests use it.
  int64_t max_nodes = 0;
  double unit_us = 0;      // grid; 0: 1 µs, coarser for long horizons (at most 1e8 steps)
  bool recompute = false;  // with memory: also decide which activations to recompute
  bool offload = false;    // with memory: also decide which to offload, and when to move them
};

struct [[nodiscard]] CpSolution {
  // Infeasible: proven that nothing fits; TimeLimit: none found within the time or node limit;
  // InvalidInput: the model cannot be posted (values beyond Gecode's limits); Internal: the
  // solution does not simulate, or its transfers overflow when simulated.
  Status status;
  bool proven_optimal = false;  // the search finished
  double objective_us = 0;      // the simulated makespan of `schedule`
  double bound_us = 0;          // proven: no schedule of the placement (memory = false) is faster
  Schedule schedule;
  int64_t nodes = 0;
  double wall_s = 0;
};

CpSolution solve_cp(const Problem& p, const CpOptions& options);

}  // namespace optpipe
