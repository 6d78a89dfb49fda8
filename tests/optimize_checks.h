// Options and checks the optimizer's tests share.
#pragma once

#include <gtest/gtest.h>

#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/validate.h"

namespace optpipe {

inline OptimizeOptions quick(int64_t evaluations = 20000, uint64_t seed = 0, int threads = 1) {
  OptimizeOptions o;
  o.time_limit_s = 600;  // the evaluation budget, not the clock, ends these runs
  o.max_evaluations = evaluations;
  o.seed = seed;
  o.threads = threads;
  return o;
}

inline Problem with_budget(Problem p, int64_t budget) {
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = budget;
  return p;
}

// The fastest family schedule that fits, or 0.
inline double best_fitting_family(const Problem& p, bool as_published_only = false) {
  const std::vector<FamilyRun> runs = run_families(p, {.op_times = false});
  const FamilyRun* best = fastest_fitting(runs, Objective::kMakespan, as_published_only);
  return best ? best->timeline.makespan_us : 0;
}

// The answer is what it claims: ok, valid (within its budget unless infeasible), simulated again
// to the same makespan, no faster than its lower bound, with one needed budget per device.
inline testing::AssertionResult is_checked(const OptimizeResult& r) {
  if (!r.status.ok()) return testing::AssertionFailure() << r.status.message;
  Validation v = validate(r.problem, r.schedule, {.check_memory_budget = r.outcome != Outcome::kInfeasible});
  if (!v.ok()) return testing::AssertionFailure() << v.summary();
  if (v.sim.timeline.makespan_us != r.timeline.makespan_us)
    return testing::AssertionFailure() << "simulated again: " << v.sim.timeline.makespan_us << " µs, reported "
                                       << r.timeline.makespan_us << " µs";
  if (r.lower_bound_us > r.timeline.makespan_us + 1e-6)
    return testing::AssertionFailure() << "bound " << r.lower_bound_us << " µs above the makespan "
                                       << r.timeline.makespan_us;
  // The answer's own placement's bound lies between the overall bound and the makespan.
  if (r.outcome != Outcome::kInfeasible &&
      (r.placement_lower_bound_us < r.lower_bound_us || r.placement_lower_bound_us > r.timeline.makespan_us + 1e-6 ||
       r.placement_gap > r.gap + 1e-12))
    return testing::AssertionFailure() << "placement bound " << r.placement_lower_bound_us << " µs (gap "
                                       << r.placement_gap << ") against bound " << r.lower_bound_us << " (gap " << r.gap
                                       << ") and makespan " << r.timeline.makespan_us;
  // And the answer's own cut's bound between that and the makespan.
  if (r.outcome != Outcome::kInfeasible &&
      (r.cut_lower_bound_us < r.placement_lower_bound_us || r.cut_lower_bound_us > r.timeline.makespan_us + 1e-6 ||
       r.cut_gap > r.placement_gap + 1e-12))
    return testing::AssertionFailure() << "cut bound " << r.cut_lower_bound_us << " µs (gap " << r.cut_gap
                                       << ") against placement bound " << r.placement_lower_bound_us << " (gap "
                                       << r.placement_gap << ") and makespan " << r.timeline.makespan_us;
  if (r.needed_budget_bytes.size() != r.problem.devices.size())
    return testing::AssertionFailure() << r.needed_budget_bytes.size() << " needed budgets for "
                                       << r.problem.devices.size() << " devices";
  return testing::AssertionSuccess();
}

}  // namespace optpipe
