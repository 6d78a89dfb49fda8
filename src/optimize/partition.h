// The partition as a decision (private to the optimizer): layers moved between neighbouring
// stages, the schedule kept. A move changes stage durations, bytes and device static memory,
// never the schedule's ops, so the schedule re-simulates on the moved partition as it is.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "optimize/search.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"

namespace optpipe {

struct [[nodiscard]] Repartitioned {
  Problem problem;
  Score score;
  int moves = 0;  // items moved (0: no move improved the schedule)
  int64_t evaluations = 0;
};

// Steepest descent over moves of one item from one stage to another, the stages between passing
// one item on (every stage keeps at least one item): the best improving move each round, until none improves,
// max_evaluations simulations are spent, or the deadline passes. p must have layers that match its stages
// (layers_match).
Repartitioned improve_partition(const Problem& p, const Schedule& s, const Score& start, const Scoring& scoring,
                                int64_t max_evaluations, std::chrono::steady_clock::time_point deadline);

// No schedule of any partition of p's layers into its stages (same placement) finishes sooner:
// every device's share of the total work (the least a device can be given is its stages' one
// item each), the earliest a device can start (one forward item per earlier stage), one
// microbatch's chain of every forward and input-gradient backward. For the span: the average
// device's work and the heaviest item's.
// Past `deadline` the pair bounds of the V-shape and interleaved placements (docs/optimizer.md)
// stop where they are: a weaker bound, still valid.
double partition_free_lower_bound(
    const Problem& p, Objective objective = Objective::kMakespan,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    const ScheduleRules& rules = {});

// p's cut with each device's two stages' item counts swapped where its first (in model order)
// holds more (V-shape and interleaved): the same load per device, the first chunks' activations
// (which live longest) the lighter ones.
std::vector<int> lighter_first(const Problem& p);

// Cuts to start the families from on a V-shape or two-chunk interleaved placement, besides p's
// own (none equal to it or to each other): lighter_first(p), and a cut near it whose every device
// passes the pair bound's own test within 1% of the least makespan that test finds possible.
// One-item moves seldom reach either from p's cut: on the way each move alone makes the schedule
// slower. Past `deadline` the pair bound's cut is left out. The bound over every partition comes
// with them (computed on the way), complete when the deadline had not passed by then.
struct BoundGuidedCuts {
  std::vector<std::vector<int>> cuts;
  double free_bound_us = 0;  // partition_free_lower_bound(p); 0 when p's placement has none
  bool free_bound_complete = false;
};
BoundGuidedCuts bound_guided_cuts(
    const Problem& p, std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    const ScheduleRules& rules = {});

}  // namespace optpipe
