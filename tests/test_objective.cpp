// The span objective: the longest per-device span, the zero-bubble paper's cost.
#include <gtest/gtest.h>

#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/validate.h"

using namespace optpipe;

TEST(Objective, SpanUnderZbH2MemoryReachesItsSpanProvenOptimal) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 12;
  Problem p = make_uniform_problem(u);
  Result<FamilySchedule> h2 = build_family(*find_family("zb-h2"), p);
  ASSERT_TRUE(h2.ok()) << h2.status.message;
  SimResult sim = simulate(h2.value.problem, h2.value.schedule);
  ASSERT_TRUE(sim.ok());
  for (int d = 0; d < p.num_devices; d++) p.devices[d].mem_budget_bytes = sim.timeline.devices[d].peak_bytes;
  const double work_us = u.num_microbatches * (u.t_f_us + u.t_b_us + u.t_w_us);
  EXPECT_NEAR(sim.timeline.max_span_us, work_us, 1e-6) << "ZB-H2 itself has no bubble inside a device's span";

  OptimizeOptions o;
  o.time_limit_s = 600;
  o.max_evaluations = 3000;
  o.objective = Objective::kSpan;
  o.rules = {.placements = {Placement::kLinear}, .offload = false, .recompute = false};
  OptimizeResult r = optimize(p, o);
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  ASSERT_NE(r.outcome, Outcome::kInfeasible);
  EXPECT_NEAR(r.timeline.max_span_us, work_us, 1e-6);
  EXPECT_NEAR(r.lower_bound_us, work_us, 1e-6);
  EXPECT_EQ(r.outcome, Outcome::kOptimal);
  EXPECT_TRUE(validate(r.problem, r.schedule).ok());
}

TEST(Objective, SpanBoundHoldsForEveryFamily) {
  const Problem p = default_problem();
  for (const FamilyRun& run : run_families(p, {.op_times = false})) {
    if (!run.status.ok()) continue;
    EXPECT_LE(span_lower_bound(run.built.problem), run.timeline.max_span_us * (1 + 1e-12)) << run.family->name;
  }
}
