// The starts the search begins from (the list scheduler, filled greedy schedules) and the lower
// bounds it is measured against.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "brute_force.h"
#include "optimize/device_demand.h"
#include "optimize/list_scheduler.h"
#include "optimize/starts.h"
#include "optimize_checks.h"
#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"
#include "optpipe/validate.h"

using namespace optpipe;

int most_live(const DeviceSchedule& ds) {
  int live = 0, most = 0;
  for (const Op& op : ds.compute) {
    if (op.kind == OpKind::kF) most = std::max(most, ++live);
    if (op.kind == OpKind::kW || op.kind == OpKind::kBW) live--;
  }
  return most;
}

// On a V-shape or interleaved placement under a limit well below what the pipeline could keep,
// a device full of first chunks cannot run the later chunks whose backwards would free it: the
// greedy then falls back to running forwards past its limit. Reserving slots for the later chunks
// keeps every device within its limit, and on a V-shape the pipeline moving.
// A uniform problem of D devices and M microbatches on a placement of v chunks per device.
Problem uniform_placed(int devices, int microbatches, Placement placement, int v) {
  UniformSpec u;
  u.num_devices = devices;
  u.num_microbatches = microbatches;
  u.placement = placement;
  u.chunks_per_device = v;
  return make_uniform_problem(u);
}

TEST(ListScheduler, ReservingLaterChunksKeepsTheLimit) {
  for (auto [placement, v] : {std::pair{Placement::kVShape, 2}, {Placement::kInterleaved, 2}}) {
    const Problem p = uniform_placed(8, 32, placement, v);
    const int limit = p.num_devices;  // an unconstrained pipeline keeps up to 2·D·v
    ListRules plain;
    plain.max_live.assign(p.num_devices, limit);
    ListRules reserved = plain;
    reserved.reserve_later_chunks = true;
    Result<Schedule> a = list_schedule(p, plain), b = list_schedule(p, reserved);
    ASSERT_TRUE(a.ok() && b.ok());
    for (const Result<Schedule>* s : {&a, &b}) {
      Validation check = validate(p, s->value, {.check_memory_budget = false});
      ASSERT_TRUE(check.ok()) << check.summary();
    }
    int plain_most = 0;
    for (const DeviceSchedule& ds : a.value.devices) plain_most = std::max(plain_most, most_live(ds));
    EXPECT_GT(plain_most, 2 * limit) << placement_name(placement);
    for (const DeviceSchedule& ds : b.value.devices) EXPECT_LE(most_live(ds), limit) << placement_name(placement);
    if (placement == Placement::kVShape) {
      EXPECT_LT(simulate(p, b.value).timeline.makespan_us, 0.6 * simulate(p, a.value).timeline.makespan_us);
    }
  }
}

// A byte limit is the budget as the simulator counts it (F holds its activation from its start,
// B and W release theirs at their ends): the nominal peak stays within it, on one chunk per
// device and, with later chunks reserved, on a V-shape; and a W left for later holds only what
// it still needs, so the same budget as a count of whole activations runs no slower.
TEST(ListScheduler, ByteLimitKeepsTheSimulatedPeak) {
  for (auto [placement, v] : {std::pair{Placement::kLinear, 1}, {Placement::kVShape, 2}}) {
    const Problem p = uniform_placed(6, 24, placement, v);
    const int whole = p.num_devices;  // activations: about half of what the pipeline keeps unconstrained
    const double cap_bytes = whole * static_cast<double>(p.stages[0].act_f_bytes);
    ListRules by_bytes, by_count, unlimited;
    by_bytes.max_act_bytes.assign(p.num_devices, cap_bytes);
    by_count.max_live.assign(p.num_devices, whole);
    by_bytes.reserve_later_chunks = by_count.reserve_later_chunks = unlimited.reserve_later_chunks = v > 1;
    Result<Schedule> a = list_schedule(p, by_bytes), b = list_schedule(p, by_count), c = list_schedule(p, unlimited);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    Validation check = validate(p, a.value, {.check_memory_budget = false});
    ASSERT_TRUE(check.ok()) << check.summary();
    const Timeline ta = simulate(p, a.value).timeline, tb = simulate(p, b.value).timeline,
                   tc = simulate(p, c.value).timeline;
    double unlimited_most = 0;
    for (int d = 0; d < p.num_devices; d++) {
      EXPECT_LE(ta.devices[d].peak_bytes - p.devices[d].static_bytes, cap_bytes) << placement_name(placement) << d;
      unlimited_most =
          std::max(unlimited_most, static_cast<double>(tc.devices[d].peak_bytes - p.devices[d].static_bytes));
    }
    EXPECT_GT(unlimited_most, cap_bytes) << placement_name(placement);  // the limit binds
    EXPECT_LE(ta.makespan_us, tb.makespan_us) << placement_name(placement);
  }
  ListRules wrong;
  wrong.max_act_bytes.assign(3, 1e9);
  EXPECT_FALSE(list_schedule(make_uniform_problem({}), wrong).ok());
}

// The byte-limited greedy with an eighth of its activations offloaded: on the shape of
// bench/make_large_problem.py (uniform 10 ms stages of 2 GiB, a host link per device, every
// budget half of 1F1B's activation peak) at D = 32, M = 128 on a V-shape, it fits and beats the
// same greedy without offloads (which fits too), and it ran ahead of the budget to do so.
// make_large_problem's shape: D uniform stages, each device its own host link, the budget half
// of 1F1B's activation peak; on a V-shape of two chunks per device.
Problem half_1f1b_vshape(int D, int M) {
  Problem p = default_problem();
  p.stages.assign(D, p.stages[1]);
  p.devices.resize(D, p.devices[0]);
  for (int d = 0; d < D; d++) p.devices[d].host_link = d;
  p.num_devices = D;
  p.num_microbatches = M;
  for (DeviceSpec& dev : p.devices) dev.mem_budget_bytes = dev.static_bytes + (int64_t{1} << 50);
  const Result<FamilySchedule> one_f_one_b = build_family(*find_family("1f1b"), p);
  EXPECT_TRUE(one_f_one_b.ok());
  const int64_t peak = max_peak(simulate(p, one_f_one_b.value.schedule).timeline) - p.devices[0].static_bytes;
  for (DeviceSpec& dev : p.devices) dev.mem_budget_bytes = dev.static_bytes + peak / 2;
  const Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  EXPECT_TRUE(v.ok());
  return v.value;
}

TEST(Starts, FilledGreedyWithOffloadsBeatsItWithout) {
  const Problem v = half_1f1b_vshape(32, 128);
  const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const FilledGreedy without = filled_greedy(v, {.reserve_later_chunks = true}, 0, 5, Objective::kMakespan, later);
  const FilledGreedy with = filled_greedy(v, {.reserve_later_chunks = true}, 0.125, 5, Objective::kMakespan, later);
  ASSERT_FALSE(without.schedule.devices.empty() || with.schedule.devices.empty());
  EXPECT_EQ(without.score.overflow_bytes, 0);
  EXPECT_EQ(with.score.overflow_bytes, 0);
  EXPECT_TRUE(has_offloads(with.schedule));
  EXPECT_LT(with.score.objective_us, 0.99 * without.score.objective_us);
  Validation check = validate(v, with.schedule, {.check_memory_budget = false});
  EXPECT_TRUE(check.ok()) << check.summary();
  // Gated as the optimizer gates its answer, it fits under any timing at no cost.
  const SimResult nominal = simulate(v, with.schedule);
  const Gated gated = gate_for_any_timing(v, with.schedule, nominal.timeline);
  const SimResult after = simulate(v, gated.schedule);
  EXPECT_TRUE(fits_any_timing(v, after.timeline));
  EXPECT_EQ(after.timeline.makespan_us, with.score.objective_us);
}

// The greedy's order is the caller's: forward-first runs more forwards ahead of a device's first
// backward than backward-first (1F1B's rule), as many as the budget holds, and both fit.
TEST(Starts, FilledGreedyKeepsTheOrderItIsGiven) {
  const Problem v = half_1f1b_vshape(8, 32);
  const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto forwards_before_first_backward = [](const Schedule& s, int d) {
    const std::vector<Op>& ops = s.devices[d].compute;
    int n = 0;
    while (n < static_cast<int>(ops.size()) && ops[n].kind == OpKind::kF) n++;
    return n;
  };
  const FilledGreedy backward_first =
      filled_greedy(v, {.reserve_later_chunks = true}, 0.5, 3, Objective::kMakespan, later);
  const FilledGreedy forward_first =
      filled_greedy(v, {.backward_first = false, .reserve_later_chunks = true}, 0.5, 3, Objective::kMakespan, later);
  ASSERT_FALSE(backward_first.schedule.devices.empty() || forward_first.schedule.devices.empty());
  EXPECT_EQ(forward_first.score.overflow_bytes, 0);
  EXPECT_EQ(backward_first.score.overflow_bytes, 0);
  // Device 0, the first to wait for its first backward (the V's turn gets its own at once).
  EXPECT_GT(forwards_before_first_backward(forward_first.schedule, 0),
            forwards_before_first_backward(backward_first.schedule, 0));
  Validation check = validate(v, forward_first.schedule, {.check_memory_budget = false});
  EXPECT_TRUE(check.ok()) << check.summary();
}

// A round over the budget is repaired and competes: D = 16, M = 64 with a quarter offloaded, the
// repaired first round (2.095 s) beats every round that fits without repairs (2.135 s).
TEST(Starts, FilledGreedyRepairsARoundOverTheBudget) {
  const Problem v = half_1f1b_vshape(16, 64);
  const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  ScheduleRules no_repair;
  no_repair.offload = no_repair.recompute = false;
  const FilledGreedy plain =
      filled_greedy(v, {.reserve_later_chunks = true}, 0.25, 3, Objective::kMakespan, later, no_repair);
  const FilledGreedy repaired = filled_greedy(v, {.reserve_later_chunks = true}, 0.25, 3, Objective::kMakespan, later);
  ASSERT_FALSE(plain.schedule.devices.empty() || repaired.schedule.devices.empty());
  EXPECT_EQ(plain.score.overflow_bytes, 0);
  EXPECT_EQ(repaired.score.overflow_bytes, 0);
  EXPECT_TRUE(repaired.repaired);
  EXPECT_LT(repaired.score.objective_us, 0.99 * plain.score.objective_us);
  Validation check = validate(v, repaired.schedule, {.check_memory_budget = false});
  EXPECT_TRUE(check.ok()) << check.summary();
  const SimResult nominal = simulate(v, repaired.schedule);
  EXPECT_TRUE(fits_budget(v, nominal.timeline));
  const Gated gated = gate_for_any_timing(v, repaired.schedule, nominal.timeline);
  const SimResult after = simulate(v, gated.schedule);
  EXPECT_TRUE(fits_any_timing(v, after.timeline));
  EXPECT_EQ(after.timeline.makespan_us, repaired.score.objective_us);
}

// ---- bounds ----

TEST(Bounds, NoFittingScheduleBeatsTheLowerBound) {
  std::mt19937 rng(7);
  int fitting = 0, memory_bound_active = 0;
  for (int trial = 0; trial < 80; trial++) {
    UniformSpec u;
    u.num_devices = 1 + static_cast<int>(rng() % 6);
    u.num_microbatches = 1 + static_cast<int>(rng() % 12);
    u.t_comm_us = rng() % 2 ? 0 : rng() % 300;
    Problem p = make_uniform_problem(u);
    for (StageSpec& st : p.stages) {
      st.t_f_us = st.t_r_us = 100 + rng() % 900;
      st.t_b_us = 100 + rng() % 1800;
      st.t_w_us = 50 + rng() % 900;
    }
    p.host_link = {1 + rng() % 50 * 1.0, 1 + rng() % 50 * 1.0, static_cast<double>(rng() % 20)};
    // Budgets from one activation to twice what 1F1B keeps on device 0.
    for (DeviceSpec& d : p.devices)
      d.mem_budget_bytes =
          d.static_bytes + p.stages[0].act_f_bytes * (1 + static_cast<int64_t>(rng() % (2 * u.num_devices)));
    const bool tight = makespan_lower_bound(p) > makespan_lower_bound(with_budget(p, int64_t{1} << 50));
    memory_bound_active += tight;
    for (const Family& f : families()) {
      Result<FamilySchedule> fs = build_family(f, p);
      if (!fs.ok()) continue;
      SimResult r = simulate(fs.value.problem, fs.value.schedule);
      ASSERT_TRUE(r.ok());
      const std::vector<int64_t> need = budget_lower_bound(fs.value.problem);
      bool fits = true;
      for (int d = 0; d < p.num_devices; d++) {
        EXPECT_GE(r.timeline.devices[d].peak_bytes, need[d]) << f.name;
        fits = fits && r.timeline.devices[d].peak_bytes <= p.devices[d].mem_budget_bytes;
      }
      if (!fits) continue;
      fitting++;
      EXPECT_GE(r.timeline.makespan_us + 1e-6, makespan_lower_bound(fs.value.problem)) << f.name << " trial " << trial;
    }
    if (trial % 10 == 0) {  // the optimizer's schedules too, offloads and recomputes included
      OptimizeResult o = optimize(p, quick(3000, trial));
      EXPECT_TRUE(is_checked(o));
    }
  }
  EXPECT_GT(fitting, 100);
  EXPECT_GT(memory_bound_active, 5);  // the memory-time bound matters in some of these
}

// ---- against brute force ----

// Device 0 of a linear pipeline (D=4, M=3, 1 ms per F, B, W) can keep two activations; its
// first B cannot start before t_F + 3 (t_F + t_B) = 7 ms, so without offloads it idles 5 ms of
// that (a forward that recomputes fills the time but costs as much again later): bound = 9 ms of
// work + 5 ms. A link fast enough to offload in time leaves the 4 ms that three forwards cannot
// fill.
TEST(Bounds, WarmUpIdleUnlessOffloadsFillIt) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 3;
  Problem p = make_uniform_problem(u);
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + 2 * p.stages[0].act_f_bytes;
  p.host_link = {0.01, 0.01, 0};  // 10 MB/s: an activation takes 100 s each way
  EXPECT_DOUBLE_EQ(makespan_lower_bound(p), 14000);
  OptimizeResult r = optimize(p, quick(3000));
  EXPECT_TRUE(is_checked(r));
  EXPECT_NE(r.outcome, Outcome::kInfeasible);
  int fitting = 0;
  for (const FamilyRun& run : run_families(p, {.op_times = false}))
    if (run.fits && run.built.problem.placement == Placement::kLinear) {
      fitting++;
      EXPECT_GE(run.timeline.makespan_us, 14000) << run.family->name;
    }
  EXPECT_GT(fitting, 0);        // 1F1B with recompute keeps only inputs
  p.host_link = {1e4, 1e4, 0};  // 0.1 ms per transfer
  EXPECT_DOUBLE_EQ(makespan_lower_bound(p), 13000);
}

// The last device of a linear pipeline (D=4, M=3, F = B = 1 ms, W = 0.5 ms, memory ample)
// starts at 3 ms and has 7.5 ms of work; after its last B the microbatch still needs three B's
// and stage 0's W (3.5 ms), of which its own three W's can cover only 1.5 ms: bound 12.5 ms
// (without the cool-down: device 0's warm-up, 11.5), and the search reaches it.
TEST(Bounds, CoolDownAfterTheLastBackward) {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 3;
  Problem p = make_uniform_problem(u);
  for (StageSpec& st : p.stages) st.t_w_us = 500;
  EXPECT_DOUBLE_EQ(makespan_lower_bound(p), 12500);
  OptimizeOptions o = quick(3000);
  o.rules.placements = {Placement::kLinear};  // (a V-shape does better: 10.25 ms)
  OptimizeResult r = optimize(p, o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_EQ(r.outcome, Outcome::kOptimal) << r.timeline.makespan_us;
}

// Forwards reach a device no faster than the slowest stage before them runs them. Linear, D = 3,
// M = 4, F = 4, 1, 1 ms, B = 1, 5, 1 ms, no W, memory ample: device 1 starts at 4 ms and has 24 ms
// of work; its first B cannot start before 7 ms, and by then one forward (1 ms) has reached it, the
// next at 8 ms: 2 ms idle that no order fills. After its last B, stage 0's B (1 ms): bound 31 ms
// (counting each stage's forwards at their own pace it was 29 ms). The search's answer, checked,
// is no faster.
TEST(Bounds, WarmUpIdleWhileForwardsArrive) {
  UniformSpec u;
  u.num_devices = 3;
  u.num_microbatches = 4;
  Problem p = make_uniform_problem(u);
  const double t_f_ms[] = {4, 1, 1}, t_b_ms[] = {1, 5, 1};
  for (int s = 0; s < 3; s++) {
    p.stages[s].t_f_us = p.stages[s].t_r_us = 1000 * t_f_ms[s];
    p.stages[s].t_b_us = 1000 * t_b_ms[s];
    p.stages[s].t_w_us = 0;
  }
  EXPECT_DOUBLE_EQ(makespan_lower_bound(p), 31000);
  OptimizeOptions o = quick(3000);
  o.rules.placements = {Placement::kLinear};
  OptimizeResult r = optimize(p, o);
  EXPECT_TRUE(is_checked(r));
  EXPECT_GE(r.timeline.makespan_us, 31000 - 1e-6);
}

// The memory a device's warm-up forwards hold, by the time each of them is begun. Device 0 of a
// V-shape (D = 2, F = 1 ms, room for 1.5 activations, an offload taking 1.5 ms): by 3 ms, when
// stage 3's first forward can arrive, three of stage 0's have been begun, but one activation fits
// and only one offload can have ended (1 → 2.5 ms): at least 1 ms idle. Counted at τ alone (4 ms)
// and by fractions of activations it was 0.5 ms.
TEST(Bounds, WarmUpIdleWhileMemoryFillsByTheTime) {
  constexpr double kAct = 1 << 30;
  StageSpec st;
  st.t_f_us = st.t_r_us = 1000;
  st.t_b_us = st.t_w_us = 1000;
  st.act_f_bytes = static_cast<int64_t>(kAct);
  DeviceDemand dd;
  dd.first_us = 0;
  dd.capacity_bytes = 1.5 * kAct;
  dd.num_microbatches = 8;
  //                head    round trip  offload reload after B  forwards apart
  dd.stages.push_back({st, 0, 6000, 1500, 1500, 1000, 1000});
  dd.stages.push_back({st, 3000, 0, 1500, 1500, 3000, 1000});
  EXPECT_DOUBLE_EQ(warmup_idle_us(dd), 1000);
}

// Offloads go where they help most, not to the longest forwards: one forward of 10 µs whose
// activation fits and one of 9 µs whose activation does not, one offload ending by τ = 20 µs.
// Run the 9 µs one first and offload it (9 → 19 µs), the 10 µs one kept: 1 µs idle. Offloading
// the longest first and keeping a fraction of the other claimed 9.9 µs, above what that order
// achieves.
TEST(Bounds, WarmUpOffloadsAreNotTakenLongestFirst) {
  StageSpec small, large;
  small.t_f_us = small.t_r_us = 10;
  small.act_f_bytes = 1;
  large.t_f_us = large.t_r_us = 9;
  large.act_f_bytes = 100;
  DeviceDemand dd;
  dd.first_us = 0;
  dd.capacity_bytes = 1;
  dd.num_microbatches = 1;
  dd.stages.push_back({small, 0, 10, 10, 10, 0, 10});
  dd.stages.push_back({large, 0, 11, 10, 10, 0, 9});
  EXPECT_DOUBLE_EQ(warmup_idle_us(dd), 1);
}

// Where memory holds few pending W's the cool-down is longer; on tiny problems with random
// budgets (in half activations: a whole number of them fits at a time) and W sizes the bound
// stays at or below the best order that fits (brute force), also when it may assume no offload
// and no recompute, as brute force has none.
TEST(Bounds, NeverAboveTheBestOrderWithinTheBudget) {
  std::mt19937 rng(29);
  ScheduleRules neither;
  neither.offload = neither.recompute = false;
  int compared = 0, raised = 0, tight = 0;
  for (int trial = 0; trial < 40; trial++) {
    Problem p = tiny_problem(rng, 2 + static_cast<int>(rng() % 2));
    for (StageSpec& st : p.stages) {
      st.act_w_bytes = -st.act_f_bytes / (1 + static_cast<int64_t>(rng() % 4));
      st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    }
    for (DeviceSpec& d : p.devices)
      d.mem_budget_bytes = d.static_bytes + p.stages[0].act_f_bytes * (2 + static_cast<int64_t>(rng() % 5)) / 2;
    const double best = brute_force_makespan(p, true);
    if (best == 0) continue;  // nothing fits
    compared++;
    const double bound = makespan_lower_bound(p), own_bound = makespan_lower_bound(p, neither);
    EXPECT_LE(bound, own_bound + 1e-6) << "trial " << trial;
    EXPECT_LE(own_bound, best + 1e-6) << "trial " << trial;
    raised += bound > load_lower_bound(p) + 1e-6;
    tight += own_bound > best - 1e-6;
  }
  EXPECT_GT(compared, 20);
  EXPECT_GT(raised, 5);  // memory, warm-up or cool-down above the plain load bound
  EXPECT_GT(tight, 5);   // and often the best order's makespan itself
}
