// The paper's MILP on CBC: optimal on tiny problems, in agreement with brute force and with the
// simulator, with and without the memory budget.
#include <gtest/gtest.h>

#include <random>

#include "brute_force.h"
#include "optpipe/cp.h"
#include "optpipe/families.h"
#include "optpipe/milp.h"
#include "optpipe/validate.h"

using namespace optpipe;

// The solves end by their node limits, so that a test's answer does not depend on the machine's
// speed; the time limit is only a backstop against a hang.
constexpr double kBackstopS = 600;
constexpr int64_t kMaxNodes = 2000000;

TEST(Milp, ModelShape) {
  UniformSpec u;
  u.num_devices = 2;
  u.num_microbatches = 2;
  Problem p = make_uniform_problem(u);
  Result<MilpModel> m = build_milp(p, {.memory = false});
  ASSERT_TRUE(m.ok()) << m.status.message;
  EXPECT_EQ(m.value.col_lb.size(), 2 * 2 * 3 + 1 + m.value.num_binaries());  // starts, makespan, orders
  EXPECT_GT(m.value.num_binaries(), 0u);
  // Orders a device's dependencies imply are not variables: F0 before B0, F0 before F1, ...
  for (const MilpModel::Pair& pr : m.value.pairs) {
    EXPECT_FALSE(pr.a.stage == pr.b.stage && pr.a.kind == pr.b.kind) << op_name(pr.a) << " " << op_name(pr.b);
    EXPECT_FALSE(pr.a.stage == pr.b.stage && pr.a.microbatch == pr.b.microbatch)
        << op_name(pr.a) << " " << op_name(pr.b);
  }
  Result<MilpModel> with_memory = build_milp(p, {.memory = true});
  ASSERT_TRUE(with_memory.ok());
  EXPECT_GT(with_memory.value.rows.size(), m.value.rows.size());
}

TEST(Milp, OptimalAndEqualToBruteForceAndToTheSimulator) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 6; trial++) {
    Problem p = tiny_problem(rng, 2 + trial % 2);
    Result<MilpModel> m = build_milp(p, {.memory = false});
    ASSERT_TRUE(m.ok());
    MilpSolution s =
        solve_milp(p, m.value, {.memory = false, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes}, nullptr);
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal) << "trial " << trial;
    EXPECT_NEAR(s.objective_us, brute_force_makespan(p, false), 1e-4) << "trial " << trial;
    Validation v = validate(p, s.schedule);
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_NEAR(v.sim.timeline.makespan_us, s.objective_us, 1e-4) << "trial " << trial;
    EXPECT_LE(s.bound_us, s.objective_us + 1e-4);
  }
}

TEST(Milp, RespectsTheMemoryBudget) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 4; trial++) {
    Problem p = tiny_problem(rng, 3);
    // Room for two activations on device 0 (1F1B would keep up to two: D − d = 2, but the
    // schedules that are fastest without a budget keep three).
    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 2 * p.stages[0].act_f_bytes;
    const double unconstrained = brute_force_makespan(p, false);
    const double reference = brute_force_makespan(p, true);
    Result<MilpModel> m = build_milp(p, {.memory = true});
    ASSERT_TRUE(m.ok()) << m.status.message;
    Result<Schedule> warm = make_1f1b(p);  // fits: at most two activations alive
    ASSERT_TRUE(warm.ok());
    MilpSolution s =
        solve_milp(p, m.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes}, &warm.value);
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal);
    EXPECT_NEAR(s.objective_us, reference, 1e-4) << "trial " << trial;
    EXPECT_GE(s.objective_us + 1e-4, unconstrained);
    Validation v = validate(p, s.schedule);  // the budget included
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_NEAR(v.sim.timeline.makespan_us, s.objective_us, 1e-4);
  }
}

TEST(Milp, NothingFitsIsInfeasible) {
  std::mt19937 rng(9);
  Problem p = tiny_problem(rng, 2);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + p.stages[0].act_f_bytes / 2;
  Result<MilpModel> m = build_milp(p, {.memory = true});
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(m.status.code, StatusCode::kInfeasible);
}

// With recompute binaries: a budget too small to keep two activations on a device. Keeping
// only, the MILP's optimum is nearly sequential; recomputing (cheap R here), it pipelines again.
// The schedule validates within the budget, the simulator is never slower than the model's
// objective (R may start before B's block does), and a generous budget gives brute force's optimum.
TEST(Milp, RecomputeBinaries) {
  std::mt19937 rng(11);
  int helped = 0;
  for (int trial = 0; trial < 3; trial++) {
    Problem p = tiny_problem(rng, 3);
    for (StageSpec& st : p.stages) st.t_r_us = st.t_f_us / 4;
    Result<MilpModel> shape = build_milp(p, {.memory = true, .recompute = true});
    ASSERT_TRUE(shape.ok()) << shape.status.message;
    Result<MilpModel> keep_shape = build_milp(p, {.memory = true});
    EXPECT_EQ(shape.value.num_binaries(), keep_shape.value.num_binaries() + 2 * 3);
    MilpSolution roomy =
        solve_milp(p, shape.value,
                   {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true}, nullptr);
    ASSERT_TRUE(roomy.status.ok()) << roomy.status.message;
    EXPECT_NEAR(roomy.objective_us, brute_force_makespan(p, true), 1e-4) << "trial " << trial;

    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * p.stages[0].act_f_bytes / 2;
    Result<MilpModel> keep = build_milp(p, {.memory = true});
    ASSERT_TRUE(keep.ok()) << keep.status.message;
    MilpSolution kept =
        solve_milp(p, keep.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes}, nullptr);
    ASSERT_TRUE(kept.status.ok()) << kept.status.message;
    Result<MilpModel> m = build_milp(p, {.memory = true, .recompute = true});
    ASSERT_TRUE(m.ok()) << m.status.message;
    MilpSolution s =
        solve_milp(p, m.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true},
                   &kept.schedule);
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal) << "trial " << trial;
    EXPECT_LE(s.objective_us, kept.objective_us + 1e-4);
    Validation v = validate(p, s.schedule);  // the budget included
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_LE(v.sim.timeline.makespan_us, s.objective_us + 1e-4);
    size_t recomputes = 0;
    for (const DeviceSchedule& ds : s.schedule.devices)
      for (const Op& op : ds.compute) recomputes += op.kind == OpKind::kR;
    if (s.objective_us < kept.objective_us - 1e-4) {
      helped++;
      EXPECT_GT(recomputes, 0u);
    }
    // Warm-started from its own answer (R before B), the model takes it as its start.
    MilpSolution again =
        solve_milp(p, m.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true},
                   &s.schedule);
    ASSERT_TRUE(again.status.ok());
    EXPECT_NEAR(again.objective_us, s.objective_us, 1e-4);
  }
  EXPECT_GT(helped, 0);
}

// Offload binaries, transfer times and channel orders: with room they change nothing (brute
// force); under a budget that keeps one activation and a half the MILP proves its optimum, which
// equals the CP model's, and its schedule (waits and reload gates read back from the times)
// fits and simulates to exactly the MILP's objective.
TEST(Milp, OffloadBinaries) {
  std::mt19937 rng(17);
  int helped = 0;
  for (int trial = 0; trial < 4; trial++) {
    Problem p = tiny_problem(rng, 2);
    set_transfer_time(&p, 60, 40);
    const MilpOptions with_offload{.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .offload = true};
    Result<MilpModel> roomy_model = build_milp(p, with_offload);
    ASSERT_TRUE(roomy_model.ok()) << roomy_model.status.message;
    MilpSolution roomy = solve_milp(p, roomy_model.value, with_offload, nullptr);
    ASSERT_TRUE(roomy.status.ok()) << roomy.status.message;
    EXPECT_NEAR(roomy.objective_us, brute_force_makespan(p, true), 1e-4) << "trial " << trial;

    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * p.stages[0].act_f_bytes / 2;
    Result<MilpModel> keep = build_milp(p, {.memory = true});
    ASSERT_TRUE(keep.ok()) << keep.status.message;
    MilpSolution kept =
        solve_milp(p, keep.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes}, nullptr);
    ASSERT_TRUE(kept.status.ok()) << kept.status.message;
    Result<MilpModel> m = build_milp(p, with_offload);
    ASSERT_TRUE(m.ok()) << m.status.message;
    MilpSolution s = solve_milp(p, m.value, with_offload, &kept.schedule);  // warm-started, nothing offloaded
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal) << "trial " << trial;
    Validation v = validate(p, s.schedule);  // the budget included
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_NEAR(v.sim.timeline.makespan_us, s.objective_us, 1e-4) << "trial " << trial;
    CpSolution cp = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .offload = true});
    ASSERT_TRUE(cp.status.ok()) << cp.status.message;
    EXPECT_NEAR(s.objective_us, cp.objective_us, 1e-4) << "trial " << trial;
    EXPECT_LE(s.objective_us, kept.objective_us + 1e-4);
    if (s.objective_us < kept.objective_us - 1e-4) helped++;
  }
  EXPECT_GT(helped, 0);
}

namespace {

// Solves p to proven optimality, checks that the schedule read back fits and simulates to the
// MILP's objective, and returns its reloads.
std::vector<ReloadEntry> optimal_reloads(const Problem& p, const MilpOptions& options) {
  Result<MilpModel> m = build_milp(p, options);
  if (!m.ok()) {
    ADD_FAILURE() << m.status.message;
    return {};
  }
  MilpSolution s = solve_milp(p, m.value, options, nullptr);
  EXPECT_TRUE(s.status.ok()) << s.status.message;
  EXPECT_TRUE(s.proven_optimal);
  Validation v = validate(p, s.schedule);
  EXPECT_TRUE(v.ok()) << v.summary();
  if (v.ok()) {
    EXPECT_NEAR(v.sim.timeline.makespan_us, s.objective_us, 1e-4);
  }
  std::vector<ReloadEntry> out;
  for (const DeviceSchedule& ds : s.schedule.devices) out.insert(out.end(), ds.reloads.begin(), ds.reloads.end());
  return out;
}

}  // namespace

// Three microbatches through one and a half activations of room: in the optimum a reload starts
// when another activation's offload ends, not when a compute op starts. Read back with the reload
// gated on that offload, the schedule simulates to the MILP's objective (with the anchor alone
// it took 92 µs longer).
TEST(Milp, ReloadGatedOnAnotherOffload) {
  std::mt19937 rng(17);
  Problem p = tiny_problem(rng, 3);
  set_transfer_time(&p, 60, 40);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * p.stages[0].act_f_bytes / 2;
  size_t gated = 0;
  for (const ReloadEntry& r :
       optimal_reloads(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .offload = true}))
    for (const Op& x : r.after) gated += x.kind == OpKind::kOffload;
  EXPECT_GT(gated, 0u);
}

// Four microbatches through two activations of room, recompute and offload both decided: in the
// optimum a reload starts as a W ends, which frees part of the room. Issued when that W starts
// (its anchor) the reload overflowed by the W's 256 MiB; held `after` the W, the schedule fits and
// simulates to the MILP's objective.
TEST(Milp, ReloadHeldAfterAComputeOp) {
  UniformSpec u;
  u.num_devices = 2;
  u.num_microbatches = 4;
  Problem p = make_uniform_problem(u);
  const double times[2][4] = {{450, 111, 262, 112}, {418, 388, 173, 104}};  // F, B, W, R
  for (int s = 0; s < 2; s++) {
    p.stages[s].t_f_us = times[s][0];
    p.stages[s].t_b_us = times[s][1];
    p.stages[s].t_w_us = times[s][2];
    p.stages[s].t_r_us = times[s][3];
  }
  set_transfer_time(&p, 20, 147);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 2 * p.stages[0].act_f_bytes;
  size_t held_by_compute = 0;
  for (const ReloadEntry& r : optimal_reloads(
           p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true, .offload = true}))
    for (const Op& x : r.after) held_by_compute += x.kind != OpKind::kOffload;
  EXPECT_GT(held_by_compute, 0u);
}

// ---- the CP model on Gecode, against the MILP and brute force ----

TEST(Cp, AgreesWithTheMilpAndBruteForce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 6; trial++) {
    Problem p = tiny_problem(rng, 2 + trial % 2);
    CpSolution cp = solve_cp(p, {.memory = false, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes});
    ASSERT_TRUE(cp.status.ok()) << cp.status.message;
    EXPECT_TRUE(cp.proven_optimal);
    const double exact = brute_force_makespan(p, false);
    EXPECT_NEAR(cp.objective_us, exact, 1e-4) << "trial " << trial;
    EXPECT_NEAR(cp.bound_us, exact, 1e-4) << "trial " << trial;  // integer durations: no rounding
    EXPECT_TRUE(validate(p, cp.schedule).ok());
  }
}

TEST(Cp, RespectsTheMemoryBudgetLikeTheMilp) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 4; trial++) {
    Problem p = tiny_problem(rng, 3);
    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 2 * p.stages[0].act_f_bytes;
    CpSolution cp = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes});
    ASSERT_TRUE(cp.status.ok()) << cp.status.message;
    EXPECT_TRUE(cp.proven_optimal);
    Result<MilpModel> m = build_milp(p, {.memory = true});
    ASSERT_TRUE(m.ok());
    MilpSolution milp =
        solve_milp(p, m.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes}, nullptr);
    ASSERT_TRUE(milp.status.ok());
    EXPECT_NEAR(cp.objective_us, milp.objective_us, 1e-4) << "trial " << trial;
    EXPECT_NEAR(cp.objective_us, brute_force_makespan(p, true), 1e-4) << "trial " << trial;
    Validation v = validate(p, cp.schedule);  // within the budget
    EXPECT_TRUE(v.ok()) << v.summary();
  }
}

// Recompute as optional intervals: R anywhere between its F and its B. Under a budget too small
// to keep two activations the CP model finds what the MILP's R-just-before-B blocks find, or
// better, proves it, and the schedule fits; a roomy budget changes nothing.
TEST(Cp, RecomputeIntervals) {
  std::mt19937 rng(11);
  int helped = 0;
  for (int trial = 0; trial < 3; trial++) {
    Problem p = tiny_problem(rng, 3);
    for (StageSpec& st : p.stages) st.t_r_us = std::floor(st.t_f_us / 4);
    CpSolution roomy =
        solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true});
    ASSERT_TRUE(roomy.status.ok()) << roomy.status.message;
    EXPECT_NEAR(roomy.objective_us, brute_force_makespan(p, true), 1e-4) << "trial " << trial;

    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * p.stages[0].act_f_bytes / 2;
    CpSolution kept = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes});
    ASSERT_TRUE(kept.status.ok()) << kept.status.message;
    CpSolution s = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true});
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal) << "trial " << trial;
    Validation v = validate(p, s.schedule);  // the budget included
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_LE(s.objective_us, kept.objective_us + 1e-4);
    Result<MilpModel> m = build_milp(p, {.memory = true, .recompute = true});
    ASSERT_TRUE(m.ok());
    MilpSolution milp = solve_milp(
        p, m.value, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true}, nullptr);
    ASSERT_TRUE(milp.status.ok());
    EXPECT_LE(s.objective_us, milp.objective_us + 1e-4) << "trial " << trial;
    if (s.objective_us < kept.objective_us - 1e-4) helped++;
  }
  EXPECT_GT(helped, 0);
}

// Offloads as optional transfer intervals on the host link's two channels. With room to keep
// everything they change nothing; under a budget that keeps one activation and a half, the model
// proves its optimum, the schedule read back (waits included) fits and simulates to exactly the
// model's makespan, it is never slower than keeping everything and often faster, and deciding
// recomputes too is never slower than either alone.
TEST(Cp, OffloadIntervals) {
  std::mt19937 rng(17);
  int helped = 0;
  for (int trial = 0; trial < 4; trial++) {
    Problem p = tiny_problem(rng, 2);
    for (StageSpec& st : p.stages) st.t_r_us = std::floor(st.t_f_us / 4);
    // A transfer takes 60 µs of latency and 40 µs of bandwidth, against forwards of 100–500 µs.
    set_transfer_time(&p, 60, 40);
    CpSolution roomy =
        solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .offload = true});
    ASSERT_TRUE(roomy.status.ok()) << roomy.status.message;
    EXPECT_NEAR(roomy.objective_us, brute_force_makespan(p, true), 1e-4) << "trial " << trial;

    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * p.stages[0].act_f_bytes / 2;
    CpSolution kept = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes});
    ASSERT_TRUE(kept.status.ok()) << kept.status.message;
    CpSolution s = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .offload = true});
    ASSERT_TRUE(s.status.ok()) << s.status.message;
    EXPECT_TRUE(s.proven_optimal) << "trial " << trial;
    Validation v = validate(p, s.schedule);  // the budget included
    ASSERT_TRUE(v.ok()) << v.summary();
    EXPECT_NEAR(v.sim.timeline.makespan_us, s.objective_us, 1e-4);
    EXPECT_NEAR(s.objective_us, s.bound_us, 1e-4) << "trial " << trial;  // the model's own optimum
    EXPECT_LE(s.objective_us, kept.objective_us + 1e-4) << "trial " << trial;
    CpSolution both = solve_cp(
        p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true, .offload = true});
    ASSERT_TRUE(both.status.ok()) << both.status.message;
    EXPECT_TRUE(both.proven_optimal) << "trial " << trial;
    EXPECT_TRUE(validate(p, both.schedule).ok());
    CpSolution recomputed =
        solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .recompute = true});
    ASSERT_TRUE(recomputed.status.ok()) << recomputed.status.message;
    EXPECT_LE(both.objective_us, std::min(s.objective_us, recomputed.objective_us) + 1e-4) << "trial " << trial;
    size_t offloads = 0;
    for (const DeviceSchedule& ds : s.schedule.devices) offloads += ds.offloads.size();
    if (s.objective_us < kept.objective_us - 1e-4) {
      helped++;
      EXPECT_GT(offloads, 0u);
    }
  }
  EXPECT_GT(helped, 0);
}

TEST(Cp, NothingFitsIsInfeasible) {
  std::mt19937 rng(9);
  Problem p = tiny_problem(rng, 2);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + p.stages[0].act_f_bytes / 2;
  CpSolution cp = solve_cp(p, {.memory = true, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes});
  EXPECT_EQ(cp.status.code, StatusCode::kInfeasible) << cp.status.message;
  EXPECT_FALSE(cp.status.ok());
}

TEST(Cp, ZeroLengthOpsOnTheGridKeepTheirOrder) {
  std::mt19937 rng(13);
  Problem p = tiny_problem(rng, 2);
  Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok());
  for (StageSpec& st : v.value.stages) st.t_b_us = 0.3;  // rounds to nothing on a 1 µs grid
  CpSolution cp =
      solve_cp(v.value, {.memory = false, .time_limit_s = kBackstopS, .max_nodes = kMaxNodes, .unit_us = 1});
  ASSERT_TRUE(cp.status.ok()) << cp.status.message;
  EXPECT_TRUE(validate(v.value, cp.schedule).ok());
}

// The lower bound on a model's binaries, checked before building, never exceeds what a model has.
TEST(Milp, MinBinariesIsALowerBound) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; trial++) {
    Problem p = tiny_problem(rng, 2 + trial % 3);
    for (bool memory : {false, true}) {
      Result<MilpModel> m = build_milp(p, {.memory = memory});
      ASSERT_TRUE(m.ok()) << m.status.message;
      EXPECT_LE(milp_min_binaries(p), m.value.num_binaries()) << "trial " << trial;
    }
  }
  UniformSpec u;
  u.num_devices = 16;
  u.num_microbatches = 128;
  EXPECT_GT(milp_min_binaries(make_uniform_problem(u)), 100000u);  // refused without building
}
