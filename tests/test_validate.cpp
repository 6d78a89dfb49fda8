// The validator must reject seeded faults, each with a message naming device and op.
#include <gtest/gtest.h>

#include <algorithm>

#include "optpipe/families.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

struct Fixture {
  Problem problem;
  Schedule schedule;
};

Fixture zb_h1(int devices = 4, int microbatches = 8) {
  UniformSpec u;
  u.num_devices = devices;
  u.num_microbatches = microbatches;
  Fixture f{make_uniform_problem(u), {}};
  Result<Schedule> s = make_zb_h1(f.problem);
  EXPECT_TRUE(s.ok()) << s.status.message;
  f.schedule = s.value;
  return f;
}

bool mentions(const Validation& v, const std::string& text) {
  for (const Issue& i : v.issues)
    if (i.message.find(text) != std::string::npos) return true;
  return false;
}

std::vector<Op>::iterator find_op(std::vector<Op>& ops, const Op& op) { return std::find(ops.begin(), ops.end(), op); }

}  // namespace

TEST(Validate, AcceptsAFamilySchedule) {
  Fixture f = zb_h1();
  Validation v = validate(f.problem, f.schedule);
  EXPECT_TRUE(v.ok()) << v.summary();
  EXPECT_TRUE(v.sim.ok());
  EXPECT_GT(v.sim.timeline.makespan_us, 0);
}

TEST(Validate, SwappedAcrossADependency) {
  Fixture f = zb_h1();
  auto& ops = f.schedule.devices[1].compute;
  auto b = find_op(ops, Op{OpKind::kB, 1, 2});
  auto w = find_op(ops, Op{OpKind::kW, 1, 2});
  std::iter_swap(b, w);
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "device 1: W2 s1 comes before B2 s1")) << v.summary();
  EXPECT_EQ(v.issues[0].device, 1);
  EXPECT_EQ(v.issues[0].op, (Op{OpKind::kW, 1, 2}));
}

TEST(Validate, MissingOp) {
  Fixture f = zb_h1();
  auto& ops = f.schedule.devices[2].compute;
  ops.erase(find_op(ops, Op{OpKind::kW, 2, 5}));
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "device 2: W5 s2 is missing")) << v.summary();
}

TEST(Validate, DuplicateAndMisplacedOps) {
  Fixture f = zb_h1();
  f.schedule.devices[0].compute.push_back(Op{OpKind::kF, 0, 3});
  f.schedule.devices[3].compute.push_back(Op{OpKind::kF, 1, 0});
  Validation v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "device 0: F3 s0 appears more than once")) << v.summary();
  EXPECT_TRUE(mentions(v, "device 3: F0 s1 runs stage 1, which lives on device 1")) << v.summary();
}

TEST(Validate, ReloadAnchoredAfterItsBackward) {
  Fixture f = zb_h1();
  DeviceSchedule& d0 = f.schedule.devices[0];
  d0.offloads.push_back(Op{OpKind::kOffload, 0, 1});
  d0.reloads.push_back({Op{OpKind::kReload, 0, 1}, Op{OpKind::kW, 0, 1}});  // W1 comes after B1
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "device 0: RELOAD1 s0 is anchored to W1 s0, which does not come before B1 s0"))
      << v.summary();

  d0.reloads.back().anchor = Op{OpKind::kB, 0, 1};  // anchored at the B that waits for it: a deadlock too
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "anchored to B1 s0, which does not come before B1 s0")) << v.summary();

  d0.reloads.back().anchor = Op{OpKind::kF, 0, 3};  // before B1: fine
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(v.ok()) << v.summary();

  d0.reloads.back().after = {Op{OpKind::kOffload, 1, 0}};  // device 1's
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "RELOAD1 s0 waits for OFFLOAD0 s1, which is not a compute op or offload device 0 runs"))
      << v.summary();
  d0.reloads.back().after = {Op{OpKind::kOffload, 0, 2}};  // not on the schedule
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "RELOAD1 s0 waits for OFFLOAD2 s0, which is not a compute op or offload device 0 runs"))
      << v.summary();
  d0.reloads.back().after = {Op{OpKind::kW, 0, 1}};  // after B1, which waits for the reload: a deadlock
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "RELOAD1 s0 waits for W1 s0, which does not come before B1 s0")) << v.summary();
  d0.reloads.back().after.clear();
  v = validate(f.problem, f.schedule);
  ASSERT_TRUE(v.ok()) << v.summary();
  EXPECT_EQ(v.sim.timeline.devices[0].offload_bytes, f.problem.stages[0].act_f_bytes);
}

TEST(Validate, OffloadWithoutReloadAndRecomputeConflicts) {
  Fixture f = zb_h1();
  DeviceSchedule& d0 = f.schedule.devices[0];
  d0.offloads.push_back(Op{OpKind::kOffload, 0, 1});
  Validation v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "RELOAD1 s0 is missing")) << v.summary();
  d0.reloads.push_back({Op{OpKind::kReload, 0, 1}, Op{OpKind::kF, 0, 2}});
  auto& ops = d0.compute;
  ops.insert(find_op(ops, Op{OpKind::kB, 0, 1}), Op{OpKind::kR, 0, 1});
  v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "R1 s0 is not allowed: the activation is offloaded")) << v.summary();
}

TEST(Validate, AWaitNeedsItsOffloadAndComesAfterItsForward) {
  Fixture f = zb_h1();
  auto& ops = f.schedule.devices[0].compute;
  ops.insert(ops.begin(), Op{OpKind::kWait, 0, 1});
  Validation v = validate(f.problem, f.schedule);
  EXPECT_TRUE(mentions(v, "WAIT1 s0 is not allowed: there is no offload to wait for")) << v.summary();
  EXPECT_TRUE(mentions(v, "WAIT1 s0 comes before F1 s0, which it needs")) << v.summary();
}

TEST(Validate, BudgetOverrun) {
  Fixture f = zb_h1();
  // 1F1B-like memory on device 0: 4 activations of 1 GiB on 16 GiB static.
  f.problem.devices[0].mem_budget_bytes = (16ll << 30) + (3ll << 30);
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "device 0: memory peaks at 20.00 GiB")) << v.summary();
  EXPECT_TRUE(mentions(v, "over its budget of 19.00 GiB")) << v.summary();
  EXPECT_EQ(v.issues[0].device, 0);
  EXPECT_TRUE(v.issues[0].has_op);
  // The same schedule without the budget check is fine.
  EXPECT_TRUE(validate(f.problem, f.schedule, {.check_memory_budget = false}).ok());
}

TEST(Validate, CrossDeviceDeadlock) {
  Fixture f = zb_h1(2, 2);
  // Device 1 runs microbatch 1 first, device 0 sends it only after microbatch 0's backward.
  f.schedule.devices[0].compute = {{OpKind::kF, 0, 0}, {OpKind::kB, 0, 0}, {OpKind::kW, 0, 0},
                                   {OpKind::kF, 0, 1}, {OpKind::kB, 0, 1}, {OpKind::kW, 0, 1}};
  f.schedule.devices[1].compute = {{OpKind::kF, 1, 1}, {OpKind::kB, 1, 1}, {OpKind::kW, 1, 1},
                                   {OpKind::kF, 1, 0}, {OpKind::kB, 1, 0}, {OpKind::kW, 1, 0}};
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "deadlock: device 1 waits to run F1 s1")) << v.summary();
  EXPECT_TRUE(mentions(v, "deadlock: device 0 waits to run B0 s0")) << v.summary();
}

TEST(Validate, WrongPlacementOrDeviceCount) {
  Fixture f = zb_h1();
  f.schedule.placement = Placement::kVShape;
  f.schedule.chunks_per_device = 2;
  EXPECT_TRUE(mentions(validate(f.problem, f.schedule), "schedule is for placement vshape"));
  Fixture g = zb_h1();
  g.schedule.devices.pop_back();
  EXPECT_TRUE(mentions(validate(g.problem, g.schedule), "schedule has 3 devices, the problem has 4"));
}

TEST(Validate, HugeOpNumbersAreOutOfRangeNotUndefined) {
  Fixture f = zb_h1();
  f.schedule.devices[0].compute.push_back(Op{OpKind::kF, 999999999, 999999999});
  EXPECT_TRUE(mentions(validate(f.problem, f.schedule), "is out of range"));
}

TEST(Validate, AnInvalidProblemIsReportedNotSimulated) {
  Fixture f = zb_h1();
  f.problem.stages[1].t_f_us = -5;
  Validation v = validate(f.problem, f.schedule);
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(mentions(v, "the problem itself is invalid: stages[1].t_f_us")) << v.summary();
}
