// The rules a runtime imposes (schedule_rules.h): every answer of the optimizer keeps to them.
#include <gtest/gtest.h>

#include <random>

#include "fixtures.h"
#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

OptimizeOptions quick(const ScheduleRules& rules) {
  OptimizeOptions o;
  o.time_limit_s = 600;  // the evaluation budget ends these runs
  o.max_evaluations = 1500;
  o.rules = rules;
  return o;
}

int count(const Schedule& s, OpKind kind) {
  int n = 0;
  for (const DeviceSchedule& ds : s.devices) {
    if (kind == OpKind::kOffload) n += static_cast<int>(ds.offloads.size());
    for (const Op& op : ds.compute) n += op.kind == kind;
  }
  return n;
}

// What 1F1B keeps at most on a device beyond its static memory, times `share`, as every budget.
void squeeze(Problem* p, double share) {
  Result<FamilySchedule> fs = build_family(*find_family("1f1b"), *p);
  ASSERT_TRUE(fs.ok()) << fs.status.message;
  SimResult sim = simulate(fs.value.problem, fs.value.schedule);
  ASSERT_TRUE(sim.ok());
  int64_t most = 0;
  for (int d = 0; d < p->num_devices; d++)
    most = std::max(most, sim.timeline.devices[d].peak_bytes - p->devices[d].static_bytes);
  for (DeviceSpec& d : p->devices) d.mem_budget_bytes = d.static_bytes + static_cast<int64_t>(share * most);
}

}  // namespace

TEST(Rules, LinearWithoutOffloadOrRecomputeOnRandomProblems) {
  const ScheduleRules plain{.placements = {Placement::kLinear}, .offload = false, .recompute = false};
  int memory_ops_unconstrained = 0;
  for (uint32_t seed = 1; seed <= 12; seed++) {
    std::mt19937 rng(seed);
    Problem p = random_problem(rng);
    squeeze(&p, 0.6);
    OptimizeResult free = optimize(p, quick({}));
    ASSERT_TRUE(free.status.ok()) << free.status.message;
    memory_ops_unconstrained += count(free.schedule, OpKind::kOffload) + count(free.schedule, OpKind::kR);
    OptimizeResult r = optimize(p, quick(plain));
    ASSERT_TRUE(r.status.ok()) << r.status.message;
    EXPECT_EQ(r.problem.placement, Placement::kLinear) << "seed " << seed;
    EXPECT_EQ(count(r.schedule, OpKind::kOffload), 0) << "seed " << seed;
    EXPECT_EQ(count(r.schedule, OpKind::kR), 0) << "seed " << seed;
    EXPECT_TRUE(check_rules(plain, r.problem, r.schedule).ok());
    Validation v = validate(r.problem, r.schedule, {.check_memory_budget = r.outcome != Outcome::kInfeasible});
    EXPECT_TRUE(v.ok()) << v.summary();
  }
  EXPECT_GT(memory_ops_unconstrained, 0) << "the budgets never called for an offload or recompute: nothing tested";
}

TEST(Rules, NoOffloadUnderTwoChunksIsInfeasibleWithTheNeededBudget) {
  // Interleaved, two chunks a device: whatever the order, a microbatch's first chunk is alive on
  // its device when its second chunk's F starts there, and recomputing frees nothing (the input is
  // the whole activation). So without offload no schedule fits under two chunk activations; only
  // an offload of the first chunk could (a fast link, far fewer than two needed in flight).
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  u.placement = Placement::kInterleaved;
  u.chunks_per_device = 2;
  u.act_input_bytes = u.act_f_bytes;
  Problem p = make_uniform_problem(u);
  p.host_link = {1000, 1000, 0};
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 2 * u.act_f_bytes - (u.act_f_bytes >> 4);
  const ScheduleRules no_offload{.placements = {Placement::kInterleaved}, .chunk_counts = {2}, .offload = false};
  OptimizeResult r = optimize(p, quick(no_offload));
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  EXPECT_EQ(r.outcome, Outcome::kInfeasible);
  EXPECT_EQ(count(r.schedule, OpKind::kOffload), 0);
  int64_t needed = 0;
  for (int64_t b : r.needed_budget_bytes) needed = std::max(needed, b);
  EXPECT_GE(needed, p.devices[0].static_bytes + 2 * u.act_f_bytes);
}

TEST(Rules, WholeStageRecomputeCoversEveryMicrobatchOrNone) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  Problem p = make_uniform_problem(u);
  for (StageSpec& st : p.stages) st.t_r_us = st.t_f_us / 10;  // cheap recompute: worth a stage's
  squeeze(&p, 0.4);
  const ScheduleRules rules{.offload = false, .whole_stage_recompute = true};
  OptimizeResult r = optimize(p, quick(rules));
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  ASSERT_NE(r.outcome, Outcome::kInfeasible);
  EXPECT_GT(count(r.schedule, OpKind::kR), 0) << "the budget should call for recomputes";
  for (const DeviceSchedule& ds : r.schedule.devices) {
    std::vector<int> per_stage(r.problem.num_stages(), 0);
    for (const Op& op : ds.compute)
      if (op.kind == OpKind::kR) per_stage[op.stage]++;
    for (int n : per_stage) EXPECT_TRUE(n == 0 || n == p.num_microbatches) << n;
  }
  // Per microbatch, the same budget is met at least as fast.
  OptimizeResult finer = optimize(p, quick({.offload = false}));
  ASSERT_NE(finer.outcome, Outcome::kInfeasible);
  EXPECT_LE(finer.timeline.makespan_us, r.timeline.makespan_us * 1.02);
}

TEST(Rules, PlacementAndChunks) {
  Problem p = default_problem();
  const ScheduleRules rules{.placements = {Placement::kInterleaved}, .chunk_counts = {2}};
  OptimizeResult r = optimize(p, quick(rules));
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  EXPECT_EQ(r.problem.placement, Placement::kInterleaved);
  EXPECT_EQ(r.problem.chunks_per_device, 2);
  EXPECT_LE(r.lower_bound_us, r.timeline.makespan_us);
}

TEST(Rules, OptionsThatCannotHoldTogetherAreRefused) {
  EXPECT_EQ(optimize(default_problem(), quick({.placements = {Placement::kVShape}, .chunk_counts = {3}})).status.code,
            StatusCode::kInvalidInput);
  EXPECT_EQ(optimize(default_problem(), quick({.recompute = false, .whole_stage_recompute = true})).status.code,
            StatusCode::kInvalidInput);
  const Status st = check_rules({.offload = false}, default_problem(),
                                build_family(*find_family("pipeoffload"), default_problem()).value.schedule);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message.find("OFFLOAD"), std::string::npos) << st.message;
}
