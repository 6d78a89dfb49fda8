// The raced placements' bounds and the least bound of the rest of the space.
#include "optimize/placements.h"

#include <algorithm>
#include <string>

#include "optimize/partition.h"

namespace optpipe {

namespace {

// One placement's bound: with the partition searched, one that holds over every partition.
double placement_bound(const Problem& sp, Objective objective, const ScheduleRules& rules, bool partition_free,
                       const std::vector<FreeBound>& free_bounds,
                       std::chrono::steady_clock::time_point bounds_deadline) {
  if (!partition_free || !layers_match(sp)) return lower_bound_for(sp, /*fits_budget=*/true, objective, rules);
  const auto known = std::find_if(free_bounds.begin(), free_bounds.end(), [&](const FreeBound& b) {
    return b.placement == sp.placement && b.chunks_per_device == sp.chunks_per_device;
  });
  return known != free_bounds.end() && objective == Objective::kMakespan
             ? known->bound_us
             : partition_free_lower_bound(sp, objective, bounds_deadline, rules);
}

}  // namespace

Placements placements_of(const std::vector<Start>& starts, int num_searches,
                         const std::vector<PlacementCandidate>& space, bool every_placement, const NoiseSpec* robust,
                         Objective objective, const ScheduleRules& rules, bool partition_free,
                         const std::vector<FreeBound>& free_bounds,
                         std::chrono::steady_clock::time_point bounds_deadline) {
  Placements out;
  std::vector<std::string> names;
  for (int k = 0; k < num_searches; k++) {
    const Problem& sp = starts[k].built.problem;
    const std::string where = placement_label(sp.placement, sp.chunks_per_device);
    if (std::find(names.begin(), names.end(), where) != names.end()) continue;
    names.push_back(where);
    out.problems.push_back(&sp);
    out.bounds.push_back(placement_bound(sp, objective, rules, partition_free, free_bounds, bounds_deadline));
  }
  for (const PlacementCandidate& c : space) {
    if (std::find(names.begin(), names.end(), placement_label(c.placement, c.chunks_per_device)) != names.end())
      continue;
    const double bound_us = placement_bound(c.problem, objective, rules, partition_free, free_bounds, bounds_deadline);
    if (!every_placement) {
      out.others_bound_us = std::min(out.others_bound_us, bound_us);
      continue;
    }
    out.problems.push_back(&c.problem);
    out.bounds.push_back(bound_us);
  }
  if (robust)
    for (const Problem* sp : out.problems) {
      const NoiseSampler sampler(*sp, *robust);
      out.noise.emplace_back(robust->samples);
      for (int i = 0; i < robust->samples; i++) sampler.draw(i, &out.noise.back()[i]);
    }
  return out;
}

}  // namespace optpipe
