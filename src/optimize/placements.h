// The placements a race runs in and their lower bounds (private to the optimizer): each raced
// start's placement with its bound, and the least bound of the rest of the space, so that the
// answer's gap holds over the whole space.
#pragma once

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "optimize/starts.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/space.h"
#include "optpipe/status.h"

namespace optpipe {

// The placements the raced starts are in: each one's problem, its lower bound, and with
// robust_sigma its noise samples, drawn once so that every candidate meets the same.
struct Placements {
  std::vector<const Problem*> problems;
  std::vector<double> bounds;
  std::vector<NoiseSamples> noise;
  // The least bound of the space's placements not raced: the bound holds over the whole space.
  double others_bound_us = std::numeric_limits<double>::infinity();

  const NoiseSamples* noise_for(const Problem& sp) const {
    if (noise.empty()) return nullptr;
    for (size_t k = 0; k < problems.size(); k++)
      if (same_placement(*problems[k], sp)) return &noise[k];
    OPTPIPE_CHECK(false, "every raced start's placement has its samples");
    return nullptr;
  }
  double bound() const { return std::min(others_bound_us, *std::min_element(bounds.begin(), bounds.end())); }
  // The bound of sp's placement alone (the overall bound when sp's placement was not raced).
  double bound_of(const Problem& sp) const {
    double out = bound();
    for (size_t k = 0; k < problems.size(); k++)
      if (same_placement(*problems[k], sp)) out = std::max(out, bounds[k]);
    return out;
  }
  void raise_bound(const Problem& sp, double bound_us) {
    for (size_t k = 0; k < problems.size(); k++)
      if (same_placement(*problems[k], sp)) bounds[k] = std::max(bounds[k], bound_us);
  }
};

// A bound over every partition of one placement's layers, computed before the starts.
struct FreeBound {
  Placement placement;
  int chunks_per_device;
  double bound_us;
};

// The raced starts' placements, each with its bound, and the least bound of the rest of the space;
// with `every_placement` (for the exact models to prove) the rest each as its own.
Placements placements_of(const std::vector<Start>& starts, int num_searches,
                         const std::vector<PlacementCandidate>& space, bool every_placement, const NoiseSpec* robust,
                         Objective objective, const ScheduleRules& rules, bool partition_free,
                         const std::vector<FreeBound>& free_bounds,
                         std::chrono::steady_clock::time_point bounds_deadline);

}  // namespace optpipe
