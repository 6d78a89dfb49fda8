// cp_sat.h — the problem as a CP-SAT model (Google OR-Tools), solved by the library of the pinned
// `ortools` wheel (scripts/fetch_ortools.sh), loaded at run time by src/exact/cp_sat.cpp.
//
// On the integer grid of the Gecode model (grid.h): an interval per F, B and W with a fixed size;
// the precedences of the simulator (hops between devices); first in, first out per stage and
// kind; no overlap on each device. With `recompute`, a Boolean and an optional R interval per
// stage-microbatch anywhere between its F and its B. With `offload`, a Boolean and optional
// offload and reload intervals on the channels of the device's host link (one no-overlap per
// direction, shared by the devices on the link), B after the reload. With `memory`, a reservoir
// per device whose events are the simulator's own (memory_delta: allocations at an op's start,
// frees at its end, workspace included), optional events for the chosen recomputes and transfers,
// the level within budget − static. Minimize the makespan; `hint` seeds the search. The
// solution is read back like the Gecode model's (grid.h) and simulated.
//
// The bound: CP-SAT's best objective bound, times the grid. Every duration, transfers included,
// is rounded down onto the grid and memory is exact in bytes, so any schedule of the placement
// that the model's rules allow, its start times floored onto the grid, is a solution no longer
// than it: the bound holds for all of them (`bound_holds`; not for a neighbourhood, `keep`), and
// it is at least `makespan_at_least_us` floored onto the grid, which must hold as well.
// The model relaxes the simulator besides (any start and transfer times, B and W apart even where
// a schedule fuses them); like the other exact models it keeps each stage's F, B and W first in,
// first out, which loses nothing for interchangeable microbatches.
//
//   if (cp_sat_available().ok()) {
//     CpSatSolution s = solve_cp_sat(problem, {.time_limit_s = 10, .hint = &heuristic.schedule});
//     if (s.bound_holds) bound_us = std::max(bound_us, s.bound_us);
//   }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct CpSatOptions {
  bool memory = true;
  bool recompute = false;  // with memory: also decide which activations to recompute
  bool offload = false;    // with memory: also decide which to offload, and when to move them
  double time_limit_s = 10;
  int workers = 0;  // CP-SAT's parallel workers; 0: the machine's cores, at most 8
  uint64_t seed = 0;
  double unit_us = 0;              // grid; 0: as the Gecode model's
  const Schedule* hint = nullptr;  // a schedule of the same problem to start from
  // A neighbourhood of `hint` (large-neighbourhood search): the F, B and W whose entry (by op id)
  // is true keep their order on their device as in `hint`, and their stage-microbatch its
  // recompute and offload choice; the others are free.
  const std::vector<bool>* keep = nullptr;
  // Every hinted variable fixed to its hint: whether the model admits `hint` as it is (a
  // schedule that fits must be a solution of the model for its bound to hold).
  bool fix_to_hint = false;
  // A makespan no schedule of the model's choices beats (makespan_lower_bound under the same
  // rules): the makespan's floor, so that CP-SAT stops as soon as a solution meets it.
  double makespan_at_least_us = 0;
};

struct [[nodiscard]] CpSatSolution {
  // Unavailable: the library is not there; Infeasible: proven that nothing fits; TimeLimit: no
  // solution within the limit; Internal: the solution does not simulate or overflows when read
  // back, or the library refused the model.
  Status status;
  bool proven_optimal = false;
  double objective_us = 0;   // the simulated makespan of `schedule`
  double bound_us = 0;       // CP-SAT's proven bound on the model's makespan
  bool bound_holds = false;  // bound_us bounds every schedule of the placement (see above)
  Schedule schedule;
  int64_t branches = 0, conflicts = 0;
  double wall_s = 0;
};

// Ok when CP-SAT's library loads; else why not (where it was looked for, what failed).
Status cp_sat_available();

// Models beyond 10⁵ intervals and memory events are refused (InvalidInput from solve_cp_sat):
// CP-SAT builds and presolves the whole model before its time limit can stop it. (Its
// reservoirs are kept as they are, not expanded into precedences between their events, which
// grow quadratically: D = 16, M = 128 took 5 GB that way, 0.2 GB this way.)
bool cp_sat_model_fits(const Problem& p, const CpSatOptions& options);

CpSatSolution solve_cp_sat(const Problem& p, const CpSatOptions& options);

// The serialized CpModelProto solve_cp_sat sends (for the tests, which decode it with protoc).
std::string cp_sat_model_bytes(const Problem& p, const CpSatOptions& options);

}  // namespace optpipe
