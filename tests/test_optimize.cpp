#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "brute_force.h"
#include "exact/by_start.h"
#include "optimize/list_scheduler.h"
#include "optimize/moves.h"
#include "optimize/search.h"
#include "optimize/starts.h"
#include "optimize_checks.h"
#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/json_io.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

// The plan's default problem: llama2-13b on 8 A100-40GB at 36 GiB.
Result<Problem> main_job_problem() {
  PlanSpec plan;
  plan.mem_budget_bytes = 36ll << 30;
  return build_problem(find_model("llama2-13b").value, find_cluster("8xa100-40gb").value, plan);
}

}  // namespace

TEST(Optimize, DefaultProblemIsSolvedToItsBound) {
  // On one and two chunks a device, ZB-V meets the V-shape bound: 15 ms of start-up + 240 ms of work.
  OptimizeOptions o = quick();
  o.rules.chunk_counts = {1, 2};
  OptimizeResult r = optimize(default_problem(), o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_EQ(r.outcome, Outcome::kOptimal);
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 255000);
  EXPECT_DOUBLE_EQ(r.gap, 0);
  // With four layers a stage the space holds four chunks a device, which start devices sooner:
  // faster, and bounded below the V-shape's.
  Problem layered = default_problem();
  for (StageSpec& st : layered.stages) st.num_layers = 4;
  OptimizeResult all = optimize(layered, quick());
  EXPECT_TRUE(is_checked(all));
  EXPECT_LT(all.timeline.makespan_us, 255000);
  EXPECT_LT(all.lower_bound_us, 255000);
  EXPECT_EQ(all.stats.placements_searched.size(), 7u);  // linear, vshape, interleaved v2–v4, wave v3–v4
}

TEST(Optimize, MemoryLimitedBeatsEveryFittingFamily) {
  for (int64_t gib : {45, 43}) {
    Problem p = with_budget(default_problem(), gib << 30);
    OptimizeResult r = optimize(p, quick(40000));
    EXPECT_TRUE(is_checked(r));
    ASSERT_NE(r.outcome, Outcome::kInfeasible) << gib;
    const double baseline = best_fitting_family(p);
    ASSERT_GT(baseline, 0) << gib;
    EXPECT_LT(r.timeline.makespan_us, baseline) << gib << " GiB";
  }
}

TEST(Optimize, InfeasibleBudgetSaysWhatIsNeeded) {
  const Problem base = default_problem();
  // Below static (40 GiB) + one forward's 2 GiB, and below a V-shape chunk's 1 GiB.
  Problem p = with_budget(base, 81ll << 29);
  OptimizeResult r = optimize(p, quick(5000));
  EXPECT_TRUE(is_checked(r));
  EXPECT_EQ(r.outcome, Outcome::kInfeasible);
  ASSERT_EQ(r.budget_lower_bound_bytes.size(), 4u);
  int over = 0;
  for (int d = 0; d < 4; d++) {
    // A V-shape chunk holds half a stage; the bound is over the placement searched.
    EXPECT_GE(r.budget_lower_bound_bytes[d], 40ll << 30);
    over += r.needed_budget_bytes[d] > p.devices[d].mem_budget_bytes;  // some devices may fit
    EXPECT_GE(r.needed_budget_bytes[d], r.budget_lower_bound_bytes[d]);
    EXPECT_GE(r.frugal_budget_bytes[d], r.budget_lower_bound_bytes[d]);
  }
  EXPECT_GT(over, 0);
  // At the frugal schedule's need the optimizer answers.
  const int64_t frugal = *std::max_element(r.frugal_budget_bytes.begin(), r.frugal_budget_bytes.end());
  EXPECT_GT(frugal, p.devices[0].mem_budget_bytes);
  OptimizeResult at = optimize(with_budget(base, frugal), quick(5000));
  EXPECT_TRUE(is_checked(at));
  EXPECT_NE(at.outcome, Outcome::kInfeasible);
}

TEST(Optimize, SameSeedSameAnswer) {
  Problem p = with_budget(default_problem(), 45ll << 30);
  for (int threads : {1, 2}) {
    OptimizeResult a = optimize(p, quick(8000, 7, threads)), b = optimize(p, quick(8000, 7, threads));
    EXPECT_EQ(schedule_to_json(a.schedule), schedule_to_json(b.schedule)) << threads << " thread(s)";
    EXPECT_EQ(a.stats.evaluations, b.stats.evaluations);
  }
}

TEST(Optimize, BadOptionsAndProblemsComeBackAsStatus) {
  Problem p = default_problem();
  p.stages[0].t_f_us = -1;
  EXPECT_EQ(optimize(p, quick()).status.code, StatusCode::kInvalidInput);
  OptimizeOptions o = quick();
  o.threads = 0;
  EXPECT_EQ(optimize(default_problem(), o).status.code, StatusCode::kInvalidInput);
}

TEST(Optimize, TimeLimitReturnsTheBestSoFar) {
  OptimizeOptions o;
  o.time_limit_s = 0.05;
  o.max_evaluations = int64_t{1} << 40;
  OptimizeResult r = optimize(with_budget(default_problem(), 45ll << 30), o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_TRUE(r.stats.stopped_by_time);
  EXPECT_NE(r.outcome, Outcome::kInfeasible);
}

// A search stops at its deadline whoever runs it (the race, or the partition's rounds after it,
// which once ran thousands of candidates past a 0.3 s limit): past it, not one candidate.
TEST(Optimize, ASearchPastItsDeadlineEvaluatesNothing) {
  const Problem p = with_budget(default_problem(), 45ll << 30);
  Result<FamilySchedule> start = build_family(*find_family("1f1b"), p);
  ASSERT_TRUE(start.ok());
  SearchShared shared;
  shared.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  SearchResult ran = local_search(start.value.problem, start.value.schedule, 1, 50, shared);
  EXPECT_GT(ran.evaluations, 0);
  shared.deadline = std::chrono::steady_clock::now();
  SearchResult stopped = local_search(start.value.problem, start.value.schedule, 1, 50, shared);
  EXPECT_EQ(stopped.evaluations, 0);
  EXPECT_EQ(stopped.best.num_ops(), start.value.schedule.num_ops());
}

// A tiled move repeats its change wherever the device's order repeats the window k microbatches
// on: every period of a steady state, never into a warm-up or cool-down whose ops differ, never
// onto a window that overlaps the last.
TEST(Search, WindowRepeatsAreTheSteadyStatesPeriods) {
  auto f = [](int mb) { return Op{OpKind::kF, 0, mb}; };
  auto bw = [](int mb) { return Op{OpKind::kBW, 0, mb}; };
  // Warm-up F0 F1, steady (B k, F k+2) for k = 0..2, cool-down B3 B4.
  const std::vector<Op> ops{f(0), f(1), bw(0), f(2), bw(1), f(3), bw(2), f(4), bw(3), bw(4)};
  EXPECT_EQ(window_repeats(ops, 4, 5, 5), (std::vector<int>{2, -2}));    // (B1 F3): B2 F4 on, B0 F2 back
  EXPECT_EQ(window_repeats(ops, 1, 2, 5), (std::vector<int>{2, 4, 6}));  // (F1 B0); F0 has no B-1
  EXPECT_TRUE(window_repeats(ops, 1, 3, 5).empty());                     // (F1 B0 F2): F2 B1 F3 overlaps

  // 1F1B's device 0 at M = 16: the offsets are exactly the windows that recur one microbatch
  // step after another, found by brute force.
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 16;
  Result<FamilySchedule> fam = build_family(*find_family("1f1b"), make_uniform_problem(u));
  ASSERT_TRUE(fam.ok());
  const std::vector<Op>& dev0 = fam.value.schedule.devices[0].compute;
  const int lo = find_op(dev0, Op{OpKind::kBW, 0, 5}), hi = lo + 1;
  ASSERT_GE(lo, 0);
  auto recurs = [&](int t, int k) {
    for (int u = 0; u <= hi - lo; u++) {
      const Op& a = dev0[lo + u];
      if (t + u >= static_cast<int>(dev0.size()) || !(dev0[t + u] == Op{a.kind, a.stage, a.microbatch + k}))
        return false;
    }
    return true;
  };
  std::vector<int> expected;
  for (const int dir : {1, -1})
    for (int k = dir;; k += dir) {
      const int t = find_op(dev0, Op{dev0[lo].kind, 0, dev0[lo].microbatch + k});
      if (t < 0 || !recurs(t, k)) break;
      expected.push_back(t - lo);
    }
  EXPECT_EQ(window_repeats(dev0, lo, hi, 16), expected);
  EXPECT_GE(expected.size(), 8u);  // the steady state holds most of the 16 microbatches
}

TEST(Search, CoolDownWsMoveAfterLaterBackwards) {
  auto op = [](OpKind kind, int stage, int mb) { return Op{kind, stage, mb}; };
  const OpKind F = OpKind::kF, B = OpKind::kB, W = OpKind::kW, BW = OpKind::kBW;
  // Two stages on one device; from the 2nd last B on, each W passes the next backward.
  std::vector<Op> ops{op(F, 0, 2), op(B, 1, 1), op(W, 1, 1), op(B, 0, 1), op(W, 0, 1),
                      op(B, 1, 2), op(W, 1, 2), op(B, 0, 2), op(W, 0, 2)};
  EXPECT_EQ(defer_cooldown_ws(ops, 2, 1, /*split_fused=*/false), 5u);
  EXPECT_EQ(ops, (std::vector<Op>{op(F, 0, 2), op(B, 1, 1), op(W, 1, 1), op(B, 0, 1), op(W, 0, 1), op(B, 1, 2),
                                  op(B, 0, 2), op(W, 1, 2), op(W, 0, 2)}));
  // Past every backward, they keep their order at the end; nothing left to move says so.
  std::vector<Op> all = {op(B, 1, 1), op(W, 1, 1), op(B, 0, 1), op(W, 0, 1), op(B, 1, 2), op(W, 1, 2)};
  EXPECT_EQ(defer_cooldown_ws(all, 3, 4, false), 0u);
  EXPECT_EQ(all, (std::vector<Op>{op(B, 1, 1), op(B, 0, 1), op(B, 1, 2), op(W, 1, 1), op(W, 0, 1), op(W, 1, 2)}));
  EXPECT_EQ(defer_cooldown_ws(all, 3, 4, false), all.size());
  // split_fused: the last fused backwards split, each W after the next backward.
  std::vector<Op> fused{op(F, 0, 3), op(BW, 0, 1), op(BW, 0, 2), op(BW, 0, 3)};
  EXPECT_EQ(defer_cooldown_ws(fused, 2, 1, /*split_fused=*/true), 2u);
  EXPECT_EQ(fused, (std::vector<Op>{op(F, 0, 3), op(BW, 0, 1), op(B, 0, 2), op(B, 0, 3), op(W, 0, 2), op(W, 0, 3)}));
}

// However short the limit, every family as published is considered (their practitioner tunings
// only as the limit allows) unless the families alone outlast it by a quarter second: on a large
// problem whose repairs alone outlast the limit, the answer still fits and is no slower than the
// fastest family that fits as published. Under a sanitizer (several times slower; CI's ASan run
// once built too few in time) only the families built are held to.
TEST(Optimize, ShortLimitNeverLosesToAFamily) {
  UniformSpec u;
  u.num_devices = 16;
  u.num_microbatches = 128;
  u.t_f_us = u.t_b_us = u.t_w_us = 40000;
  Problem p = make_uniform_problem(u);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 8 * p.stages[0].act_f_bytes;  // 1F1B: 16
  const double baseline = best_fitting_family(p, /*as_published_only=*/true);
  ASSERT_GT(baseline, 0);
  OptimizeOptions o;
  o.time_limit_s = 0.01;
  OptimizeResult r = optimize(p, o);
  EXPECT_TRUE(is_checked(r));
  ASSERT_NE(r.outcome, Outcome::kInfeasible);
  ASSERT_GT(r.stats.best_published_family.makespan_us, 0);
  EXPECT_LE(r.timeline.makespan_us, r.stats.best_published_family.makespan_us);
#ifndef __SANITIZE_ADDRESS__
  EXPECT_DOUBLE_EQ(r.stats.best_published_family.makespan_us, baseline);  // every family was built
#endif
  EXPECT_TRUE(r.stats.stopped_by_time);
}

// ---- greedy starts ----

// The most activations (F to its W or BW) a device's order ever holds at once.
TEST(Optimize, MatchesBruteForceOnTinyProblems) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 8; trial++) {
    const int M = 2 + static_cast<int>(rng() % 2);
    Problem p = tiny_problem(rng, M);
    const double exact = brute_force_makespan(p, false);
    OptimizeResult r = optimize(p, quick(20000, trial));
    EXPECT_TRUE(is_checked(r));
    // The search may also pick another placement, which can only be as good or better.
    EXPECT_LE(r.timeline.makespan_us, exact + 1e-6) << "trial " << trial << " M=" << M;
  }
}

TEST(Optimize, ExactProvesOptimalityOnTinyProblems) {
  std::mt19937 rng(21);
  int proven = 0, open_gaps = 0;
  for (int trial = 0; trial < 40; trial++) {
    Problem p = tiny_problem(rng, 2 + static_cast<int>(rng() % 2));
    OptimizeResult heuristic = optimize(p, quick(20000, trial));
    if (heuristic.gap == 0) continue;  // the simple bound already proves it
    if (++open_gaps > 4) break;        // enough, at ~3 s each
    OptimizeOptions o = quick(20000, trial);
    o.exact = true;
    OptimizeResult r = optimize(p, o);
    EXPECT_TRUE(is_checked(r));
    EXPECT_GT(r.stats.exact_solves, 0);
    EXPECT_GE(r.lower_bound_us + 1e-6, heuristic.lower_bound_us);
    EXPECT_LE(r.timeline.makespan_us, heuristic.timeline.makespan_us + 1e-6);
    proven += r.outcome == Outcome::kOptimal;
  }
  EXPECT_EQ(open_gaps, 5);  // the test must exercise the exact models
  // Over the whole space (up to seven placements, each to be proven): 3 of the 4 close.
  EXPECT_GE(proven, 3);
}

// Under a budget with neither offloads nor recomputes allowed, the MILP with the budget proves
// what the search found (uniform stages of the built-in problem, budgets 1F1B's peak and half way
// to the least that fits; the heuristic's own bound left gaps of 24%). On the 4-device budgets,
// fractions of an activation, the byte-limited greedy start now meets the bound by itself.
TEST(Optimize, ExactKeepsTheBudgetedProof) {
  struct Case {
    int devices, microbatches;
    std::vector<int> quarter_activations;  // room above static memory, per device
    bool heuristic_gap;                    // the search alone leaves a gap
  };
  for (const Case& c : {Case{2, 4, {8, 4}, true}, Case{4, 8, {10, 8, 6, 4}, false}}) {
    Problem p = default_problem();
    p.stages.assign(c.devices, p.stages[1]);
    p.devices.resize(c.devices, p.devices[0]);
    for (int d = 0; d < c.devices; d++) {
      p.devices[d].host_link = d;
      p.devices[d].mem_budget_bytes =
          p.devices[d].static_bytes + c.quarter_activations[d] * p.stages[0].act_f_bytes / 4;
    }
    p.num_devices = c.devices;
    p.num_microbatches = c.microbatches;
    OptimizeOptions o = quick(2000);
    o.time_limit_s = 8;  // the exact models' share of it
    o.rules.placements = {Placement::kLinear};
    o.rules.offload = o.rules.recompute = false;
    OptimizeResult heuristic = optimize(p, o);
    ASSERT_TRUE(is_checked(heuristic));
    if (c.heuristic_gap)
      EXPECT_GT(heuristic.gap, 0.05) << "D=" << c.devices;  // what the simple bound leaves
    else
      EXPECT_EQ(heuristic.outcome, Outcome::kOptimal) << "D=" << c.devices;
    o.exact = true;
    OptimizeResult r = optimize(p, o);
    ASSERT_TRUE(is_checked(r));
    EXPECT_EQ(r.outcome, Outcome::kOptimal)
        << "D=" << c.devices << ": " << r.timeline.makespan_us << " vs bound " << r.lower_bound_us;
  }
}

// Memory repair, one peak per simulation or every overflow per simulation: GPipe (M activations
// per device) under budgets 1F1B fits and below, on uniform and varied stages, comes back valid
// and fitting.
TEST(Optimize, EveryActivationAliveIsAGreedyStart) {
  UniformSpec u;
  u.num_devices = 8;
  u.num_microbatches = 8;
  OptimizeOptions o = quick(2000);
  o.rules.placements = {Placement::kInterleaved};
  o.rules.chunk_counts = {2};
  OptimizeResult r = optimize(make_uniform_problem(u), o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_EQ(r.outcome, Outcome::kOptimal) << r.timeline.makespan_us << " vs bound " << r.lower_bound_us;
  EXPECT_EQ(r.problem.placement, Placement::kInterleaved);
}

// Without an evaluation budget the search runs until the time limit, unless its best schedule
// meets the lower bound: then it stops there.
TEST(Optimize, SearchUntilTheTimeLimitStopsAtAProvenOptimum) {
  OptimizeOptions o;
  o.time_limit_s = 60;
  OptimizeResult r = optimize(default_problem(), o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_EQ(r.outcome, Outcome::kOptimal);
  EXPECT_FALSE(r.stats.stopped_by_time);
}

// When B frees nothing, a W deferred past a peak holds its whole activation: the repair must run
// such a W right after its B (no compute added), which ZB-V's W-deferring order needs under a
// tight budget even with every long-lived activation offloaded.
TEST(Optimize, DropNeedlessRecomputesAndOffloads) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  Problem p = make_uniform_problem(u);
  for (StageSpec& st : p.stages) st.t_r_us = st.t_f_us;
  Result<Schedule> recomputed = make_1f1b_recompute(p);
  ASSERT_TRUE(recomputed.ok()) << recomputed.status.message;
  // Device 0 keeps up to 4 activations in 1F1B: room for 3 of them.
  const int64_t act = p.stages[0].act_f_bytes;
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 3 * act;
  const SimResult before = simulate(p, recomputed.value);
  ASSERT_TRUE(before.ok());
  Tidied t = drop_needless(p, recomputed.value, 10000, std::chrono::steady_clock::time_point::max());
  Validation v = validate(p, t.schedule);  // the budget included
  ASSERT_TRUE(v.ok()) << v.summary();
  EXPECT_LE(v.sim.timeline.makespan_us, before.timeline.makespan_us);
  int left_on_device0 = 0, left_elsewhere = 0;
  for (int d = 0; d < p.num_devices; d++)
    for (const Op& op : t.schedule.devices[d].compute)
      if (op.kind == OpKind::kR) (d == 0 ? left_on_device0 : left_elsewhere)++;
  EXPECT_GT(left_on_device0, 0);
  EXPECT_EQ(left_elsewhere, 0);
  EXPECT_EQ(t.recomputes_dropped, 4 * 8 - left_on_device0);

  Schedule offloaded = make_1f1b(p).value;
  for (DeviceSchedule& ds : offloaded.devices) {
    const int stage = ds.compute[0].stage;
    for (int i = 0; i < u.num_microbatches; i++) insert_offload(ds, stage, i, backward_index(ds.compute, stage, i) - 1);
  }
  Tidied roomy =
      drop_needless(with_budget(p, int64_t{1} << 62), offloaded, 10000, std::chrono::steady_clock::time_point::max());
  EXPECT_EQ(roomy.offloads_dropped, 4 * 8);
  for (const DeviceSchedule& ds : roomy.schedule.devices) EXPECT_TRUE(ds.offloads.empty() && ds.reloads.empty());
}

// Offloads inserted at once land where inserting them one by one puts them: ZB-V's two chunks per
// device, half of the activations offloaded first, the rest at once and one by one in a random
// order; both lists in compute order (offloads by forward, reloads by backward).
TEST(Optimize, AnswersFitUnderAnyTimingAtNoCost) {
  const Result<Problem> p = main_job_problem();
  ASSERT_TRUE(p.ok()) << p.status.message;
  OptimizeOptions exact = quick(4000);
  exact.any_timing = false;
  OptimizeResult loose = optimize(p.value, exact);
  ASSERT_NE(loose.outcome, Outcome::kInfeasible);
  EXPECT_TRUE(fits_budget(loose.problem, loose.timeline));
  EXPECT_FALSE(fits_any_timing(loose.problem, loose.timeline));
  Validation v = validate(loose.problem, loose.schedule);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.summary().find("if offloads run late or reloads start early"), std::string::npos) << v.summary();

  OptimizeResult safe = optimize(p.value, quick(4000));
  EXPECT_TRUE(is_checked(safe));
  ASSERT_NE(safe.outcome, Outcome::kInfeasible);
  EXPECT_TRUE(fits_any_timing(safe.problem, safe.timeline));
  EXPECT_GT(safe.stats.waits_added + safe.stats.reload_gates_added, 0);
  EXPECT_NEAR(safe.timeline.makespan_us, loose.timeline.makespan_us, 1e-3 * loose.timeline.makespan_us);
  for (int d = 0; d < safe.problem.num_devices; d++)
    EXPECT_EQ(safe.needed_budget_bytes[d], safe.timeline.devices[d].worst_peak_bytes);
}

// Static memory alone over a device's budget: refused before any search, naming the device.
TEST(Optimize, StaticMemoryOverTheBudgetIsRefusedAtOnce) {
  Problem p = default_problem();
  p.devices[2].mem_budget_bytes = p.devices[2].static_bytes - 1;
  OptimizeOptions o;
  o.time_limit_s = 600;  // an answer that searched would take it
  OptimizeResult r = optimize(p, o);
  EXPECT_EQ(r.status.code, StatusCode::kInfeasible);
  EXPECT_NE(r.status.message.find("device 2's static memory alone"), std::string::npos) << r.status.message;
  EXPECT_EQ(r.stats.evaluations, 0);
  p.devices[2].mem_budget_bytes = p.devices[2].static_bytes;  // exactly full: searched, and nothing fits
  o.max_evaluations = 200;
  EXPECT_TRUE(optimize(p, o).status.ok());
}

// A wave's starts are cut to balance each device's load, not each stage's: llama2-13b on 8
// devices, wave v4, where the per-stage balanced cut gives devices 6 and 7 two 2-layer stages
// each (11.8 s of work against device 0's 9.0 s) and the explicit run answered 12.5 s at 10 s.
TEST(Optimize, WaveStartsBalanceTheDevicesWork) {
  const Result<Problem> p = main_job_problem();
  ASSERT_TRUE(p.ok()) << p.status.message;
  OptimizeOptions o = quick(300);
  o.rules.placements = {Placement::kWave};
  o.rules.chunk_counts = {4};
  OptimizeResult r = optimize(p.value, o);
  ASSERT_TRUE(is_checked(r));
  ASSERT_EQ(r.problem.placement, Placement::kWave);
  double least_us = 1e300, most_us = 0;
  for (const DeviceFigures& f : r.timeline.devices) {
    least_us = std::min(least_us, f.busy_us);
    most_us = std::max(most_us, f.busy_us);
  }
  // Within one layer's F, B and W for every microbatch (1.93 s) of each other.
  const LayerSpec& layer = p.value.layers[1];
  EXPECT_LT(most_us - least_us, 1.01 * p.value.num_microbatches * (layer.t_f_us + layer.t_b_us + layer.t_w_us));
}
