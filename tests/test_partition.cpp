// The partition: moved and pinned cuts, the frameworks' rules, the bounds over every cut and
// the bound-guided cuts; and the bounds over every placement and chunk count of the space.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <random>

#include "fixtures.h"
#include "optimize/frugal.h"
#include "optimize/partition.h"
#include "optimize_checks.h"
#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/simulate.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

Problem llama_13b(int microbatches) {
  Result<Problem> p = build_problem(find_model("llama2-13b").value, find_cluster("8xa100-40gb").value,
                                    {.num_microbatches = microbatches});
  OPTPIPE_CHECK(p.ok(), p.status.message);
  return p.value;
}

std::vector<int> random_counts(std::mt19937& rng, int items, int stages) {
  std::vector<int> counts(stages, 1);
  for (int k = stages; k < items; k++) counts[rng() % stages]++;
  return counts;
}

}  // namespace

TEST(Partition, AMovedPartitionIsTheProblemCutThatWay) {
  const Problem p = llama_13b(16);
  std::mt19937 rng(25);
  Result<FamilySchedule> fs = build_family(*find_family("zb-v"), p);
  ASSERT_TRUE(fs.ok());
  for (int trial = 0; trial < 20; trial++) {
    const std::vector<int> counts =
        random_counts(rng, static_cast<int>(p.layers.size()), fs.value.problem.num_stages());
    Result<Problem> moved = with_partition(fs.value.problem, counts);
    ASSERT_TRUE(moved.ok()) << moved.status.message;
    // From scratch: the cost model's items, cut straight into these counts on the V-shape.
    Problem fresh = p;
    fresh.placement = Placement::kVShape;
    fresh.chunks_per_device = 2;
    cut_layers(counts, &fresh);
    SimResult a = simulate(moved.value, fs.value.schedule), b = simulate(fresh, fs.value.schedule);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a.timeline.makespan_us, b.timeline.makespan_us);
    for (int d = 0; d < p.num_devices; d++)
      EXPECT_EQ(a.timeline.devices[d].peak_bytes, b.timeline.devices[d].peak_bytes);
    // The schedule names its partition, and problem_for reads it back on it.
    Schedule named = fs.value.schedule;
    named.items_per_stage = counts;
    Result<Problem> read = problem_for(p, named);
    ASSERT_TRUE(read.ok());
    EXPECT_EQ(items_per_stage(read.value), counts);
  }
  EXPECT_FALSE(with_partition(p, std::vector<int>(8, 1)).ok());     // sums to 8, not 42
  EXPECT_FALSE(with_partition(p, std::vector<int>(7, 6)).ok());     // 7 counts for 8 stages
  EXPECT_FALSE(with_partition(p, {0, 7, 5, 5, 5, 5, 5, 10}).ok());  // an empty stage
}

TEST(Partition, PracticeRulesCutAsTheFrameworksDo) {
  Problem p = llama_13b(16);  // 40 layers on 8 stages
  auto layers = [&](PartitionRule rule) {
    Result<std::vector<int>> counts = partition_counts(p, rule);
    OPTPIPE_CHECK(counts.ok(), counts.status.message);
    Problem q = p;
    for (int s = 0; s < 8; s++) q.stages[s].num_layers = counts.value[s];
    return transformer_layers_per_stage(q);
  };
  EXPECT_EQ(layers(PartitionRule::kEven), std::vector<int>(8, 5));
  // 42 counting the embedding and head as a layer each, 42 / 8 = 5 a stage, the first 42 % 8 = 2
  // stages one more (torchtitan's _generate_llm_fqn_per_model_part); the first and last stage
  // hold the embedding and head in place of a layer.
  EXPECT_EQ(layers(PartitionRule::kEvenAccounted), (std::vector<int>{5, 6, 5, 5, 5, 5, 5, 4}));
  p.num_microbatches = 8;
  Result<Problem> v = rechunk(p, Placement::kVShape, 2);
  ASSERT_TRUE(v.ok());
  Problem devices = p;
  devices.partition = PartitionRule::kDevices;
  Result<Problem> vd = rechunk(devices, Placement::kVShape, 2);
  ASSERT_TRUE(vd.ok());
  // The devices' cut evens the devices' work at least as well as the stages' cut.
  auto busiest = [](const Problem& q) {
    double most = 0;
    for (int d = 0; d < q.num_devices; d++) most = std::max(most, q.work_us(d));
    return most;
  };
  EXPECT_LE(busiest(vd.value), busiest(v.value));
  EXPECT_LT(busiest(vd.value), busiest(v.value) * 0.99);  // here strictly: device 0 holds both ends
}

TEST(Partition, PinnedPartitionsStayAndTheFreeBoundHolds) {
  const Problem base = llama_13b(8);
  std::mt19937 rng(26);
  int own_cut_tighter = 0;
  for (int trial = 0; trial < 4; trial++) {
    const std::vector<int> counts = random_counts(rng, static_cast<int>(base.layers.size()), 8);
    Result<Problem> pinned = with_partition(base, counts);
    ASSERT_TRUE(pinned.ok());
    Problem q = pinned.value;
    for (DeviceSpec& d : q.devices) d.mem_budget_bytes = 80ll << 30;
    OptimizeOptions o = quick(300, static_cast<uint64_t>(trial), 1);
    o.rules.fixed_partition = true;
    o.rules.placements = {Placement::kLinear};
    OptimizeResult fixed = optimize(q, o);
    ASSERT_TRUE(fixed.status.ok()) << fixed.status.message;
    ASSERT_NE(fixed.outcome, Outcome::kInfeasible);
    EXPECT_EQ(items_per_stage(fixed.problem), counts);  // no move, repair or start changed it
    EXPECT_EQ(fixed.cut_gap, fixed.placement_gap);      // pinned, its cut is the only one
    // The free bound holds for every partition: below this optimized makespan on this one.
    o.rules.fixed_partition = false;
    OptimizeResult free = optimize(q, o);
    ASSERT_TRUE(free.status.ok());
    EXPECT_LE(free.lower_bound_us, fixed.timeline.makespan_us) << "trial " << trial;
    EXPECT_LE(free.timeline.makespan_us, fixed.timeline.makespan_us * (1 + 1e-9) + 1) << "free no worse than pinned";
    // The answer's own cut's bound is that cut's: at or above the bound over every cut, at or
    // below the answer.
    EXPECT_GE(free.cut_lower_bound_us, makespan_lower_bound(free.problem) * (1 - 1e-12));
    EXPECT_GE(free.cut_lower_bound_us, free.placement_lower_bound_us);
    EXPECT_LE(free.cut_lower_bound_us, free.timeline.makespan_us * (1 + 1e-12));
    own_cut_tighter += free.cut_lower_bound_us > free.placement_lower_bound_us;
  }
  EXPECT_GT(own_cut_tighter, 0) << "the bound over every cut is below one cut's";
}

// The bound over every partition sees memory: on small random models (every partition
// enumerated) it is never above the makespan bound of any one partition, and the budget raises it
// on some.
namespace {

// Every cut of `items` into `stages` runs of at least one item.
void every_cut(int items, int stages, std::vector<int>& counts, std::vector<std::vector<int>>* out) {
  if (static_cast<int>(counts.size()) == stages - 1) {
    counts.push_back(items);
    out->push_back(counts);
    counts.pop_back();
    return;
  }
  for (int n = 1; n <= items - (stages - 1 - static_cast<int>(counts.size())); n++) {
    counts.push_back(n);
    every_cut(items - n, stages, counts, out);
    counts.pop_back();
  }
}

}  // namespace

namespace {

// A problem of L > S random layers on 2 to 4 devices, placed by `placement`, cut into its stages
// the first way every_cut lists, with every such cut in *cuts; budgets from a few activations to
// what most of 1F1B keeps.
Problem random_layered_problem(std::mt19937& rng, Placement placement, std::vector<std::vector<int>>* cuts) {
  UniformSpec u;
  u.num_devices = 2 + static_cast<int>(rng() % 3);
  u.num_microbatches = 2 + static_cast<int>(rng() % 10);
  u.t_comm_us = rng() % 2 ? 0 : rng() % 200;
  u.placement = placement;
  u.chunks_per_device = placement == Placement::kLinear ? 1 : 2;
  Problem p = make_uniform_problem(u);
  const int S = p.num_stages(), L = S + 1 + static_cast<int>(rng() % 4);
  p.host_link = {1 + rng() % 40 * 1.0, 1 + rng() % 40 * 1.0, static_cast<double>(rng() % 20)};
  p.layers.resize(L);
  for (LayerSpec& l : p.layers) {
    l.t_f_us = 100 + rng() % 900;
    l.t_r_us = l.t_f_us * (rng() % 2 ? 1 : 0.5);
    l.t_b_us = 100 + rng() % 1800;
    l.t_w_us = 50 + rng() % 900;
    l.act_f_bytes = (1 + static_cast<int64_t>(rng() % 8)) << 28;
    l.act_w_bytes = -l.act_f_bytes / (1 + static_cast<int64_t>(rng() % 4));
    l.act_input_bytes = l.act_f_bytes / 16;
    l.static_bytes = (1 + static_cast<int64_t>(rng() % 4)) << 30;
  }
  for (DeviceSpec& d : p.devices)
    d.mem_budget_bytes = (int64_t{6} << 30) + (static_cast<int64_t>(rng() % (4 * S)) << 28);
  std::vector<int> counts;
  every_cut(L, S, counts, cuts);
  cut_layers(cuts->front(), &p);
  return p;
}

}  // namespace

TEST(Partition, TheFreeBoundIsBelowEveryPartitionsBound) {
  std::mt19937 rng(28);
  int memory_raised = 0, cuts_checked = 0, stopped_lower = 0;
  for (int trial = 0; trial < 60; trial++) {
    const Placement placements[] = {Placement::kLinear, Placement::kVShape, Placement::kInterleaved};
    std::vector<std::vector<int>> cuts;
    Problem p = random_layered_problem(rng, placements[trial % 3], &cuts);
    const double free_bound = partition_free_lower_bound(p);
    double least = std::numeric_limits<double>::infinity();
    for (const std::vector<int>& cut : cuts) {
      Result<Problem> q = with_partition(p, cut);
      ASSERT_TRUE(q.ok()) << q.status.message;
      least = std::min(least, makespan_lower_bound(q.value));
      cuts_checked++;
    }
    EXPECT_LE(free_bound, least * (1 + 1e-9)) << "trial " << trial;
    // Stopped at once, the pair bounds give up what they had not proven: lower, never higher.
    const double stopped = partition_free_lower_bound(p, Objective::kMakespan, std::chrono::steady_clock::time_point{});
    EXPECT_LE(stopped, free_bound) << "trial " << trial;
    stopped_lower += stopped < free_bound;
    Problem rich = p;
    for (DeviceSpec& d : rich.devices) d.mem_budget_bytes = int64_t{1} << 50;
    memory_raised += free_bound > partition_free_lower_bound(rich) * (1 + 1e-9);
  }
  EXPECT_GT(cuts_checked, 1000);
  EXPECT_GT(memory_raised, 10);
  EXPECT_GT(stopped_lower, 0);
}

// With the partition free the exact models' proofs hold for the cut they ran on: they tell the
// answer's own cut (cut_gap) where the bound over every cut cannot (gap).
TEST(Partition, TheExactModelsProveTheAnswersOwnCut) {
  std::mt19937 rng(30);
  int cut_proven = 0, tried = 0;
  for (int trial = 0; trial < 40 && tried < 6; trial++) {
    std::vector<std::vector<int>> cuts;
    Problem p = random_layered_problem(rng, Placement::kLinear, &cuts);
    p.num_microbatches = std::min(p.num_microbatches, 4);
    OptimizeOptions o = quick(2000, static_cast<uint64_t>(trial), 1);
    o.time_limit_s = 3;
    o.rules.placements = {Placement::kLinear};
    const OptimizeResult heuristic = optimize(p, o);
    if (!heuristic.status.ok() || heuristic.outcome != Outcome::kFeasible || heuristic.cut_gap == 0)
      continue;  // static memory alone over budget, or nothing to prove
    tried++;
    o.exact = true;
    const OptimizeResult r = optimize(p, o);
    ASSERT_TRUE(r.status.ok()) << r.status.message;
    ASSERT_NE(r.outcome, Outcome::kInfeasible);
    EXPECT_GE(r.stats.exact_solves, 1);
    EXPECT_LE(r.cut_lower_bound_us, r.timeline.makespan_us * (1 + 1e-9)) << "trial " << trial;
    EXPECT_GE(r.cut_lower_bound_us, makespan_lower_bound(r.problem) * (1 - 1e-12)) << "trial " << trial;
    cut_proven += r.cut_gap < 1e-9 && r.gap > 1e-3;
  }
  EXPECT_GE(tried, 3);
  EXPECT_GT(cut_proven, 0) << "of " << tried;
}

// The cuts the families also start from: lighter_first keeps each device's load and puts the
// fewer items on its first stage; the pair bound's cut has a bound of its own within 1% of the
// least any cut has (as the pair bound prices it).
TEST(Partition, TheBoundGuidedCutsAreNearTheBound) {
  std::mt19937 rng(29);
  int pair_cuts = 0, lighter_cuts = 0;
  for (int trial = 0; trial < 60; trial++) {
    std::vector<std::vector<int>> cuts;
    Problem p = random_layered_problem(rng, trial % 2 ? Placement::kVShape : Placement::kInterleaved, &cuts);
    p = with_partition(p, cuts[rng() % cuts.size()]).value;  // some own cut not lighter first
    const int D = p.num_devices, S = p.num_stages(), L = static_cast<int>(p.layers.size());
    double least = std::numeric_limits<double>::infinity();
    for (const std::vector<int>& cut : cuts)
      least = std::min(least, makespan_lower_bound(with_partition(p, cut).value));
    const std::vector<int> own = items_per_stage(p), lighter = lighter_first(p);
    for (int d = 0; d < D; d++) {
      const int later = p.device_of(d + D) == d ? d + D : S - 1 - d;
      EXPECT_EQ(lighter[d] + lighter[later], own[d] + own[later]) << "trial " << trial << " device " << d;
      EXPECT_LE(lighter[d], lighter[later]) << "trial " << trial << " device " << d;
    }
    const BoundGuidedCuts guided = bound_guided_cuts(p);
    EXPECT_TRUE(guided.free_bound_complete);
    EXPECT_EQ(guided.free_bound_us, partition_free_lower_bound(p)) << "trial " << trial;
    for (const std::vector<int>& cut : guided.cuts) {
      ASSERT_EQ(static_cast<int>(cut.size()), S);
      EXPECT_EQ(std::accumulate(cut.begin(), cut.end(), 0), L);
      EXPECT_GE(*std::min_element(cut.begin(), cut.end()), 1);
      EXPECT_NE(cut, own);
      if (cut == lighter) {
        lighter_cuts++;
        continue;
      }
      pair_cuts++;
      Result<Problem> q = with_partition(p, cut);
      ASSERT_TRUE(q.ok()) << q.status.message;
      // The pair bound prices a microbatch's last W as stage 0's least (its first item's): the
      // cut's own bound may pass it by the rest of stage 0's W.
      const double w_beyond_us = q.value.stages[0].t_w_us - p.layers[0].t_w_us;
      EXPECT_LE(makespan_lower_bound(q.value), 1.01 * least * (1 + 1e-9) + w_beyond_us) << "trial " << trial;
    }
  }
  EXPECT_GT(pair_cuts, 10);
  EXPECT_GT(lighter_cuts, 10);
}

// The space (every placement and chunk count the layers allow). On small random layered models
// under one budget for every device: every family on every placement and v of the space, on
// every cut of the layers (up to 40 a placement), that fits is no faster than the bound the
// optimizer reports and needs no less than its memory minimums; every answer restricted to one
// placement and v is no faster than that bound either. Fails when the bound or the minimum
// covers only some placements (they drop with v).
TEST(Space, BoundsHoldOverEveryPlacementAndChunkCount) {
  std::mt19937 rng(48);
  int checked = 0, above_two = 0, explicit_runs = 0;
  for (int trial = 0; trial < 12; trial++) {
    std::vector<std::vector<int>> unused;
    Problem p = random_layered_problem(rng, Placement::kLinear, &unused);
    // Three items a device and up to three more: the space holds three chunks a device.
    const int items = 3 * p.num_devices + static_cast<int>(rng() % 4);
    while (static_cast<int>(p.layers.size()) < items) p.layers.push_back(p.layers[rng() % p.layers.size()]);
    p.layers.resize(items);
    std::vector<int> per_stage(p.num_devices, items / p.num_devices);
    per_stage.back() += items % p.num_devices;
    cut_layers(per_stage, &p);
    // One budget: the most static bytes a device holds on the even cut, and room for 2 to 9
    // of the largest activations.
    int64_t budget = 0, largest_act = 0;
    for (const DeviceSpec& d : p.devices) budget = std::max(budget, d.static_bytes);
    for (const LayerSpec& l : p.layers) largest_act = std::max(largest_act, l.act_f_bytes);
    budget += (2 + static_cast<int64_t>(rng() % 8)) * largest_act;
    for (DeviceSpec& d : p.devices) d.mem_budget_bytes = budget;
    const OptimizeResult r = optimize(p, quick(300, 0, 1));
    if (r.status.code == StatusCode::kInfeasible) continue;  // static memory alone passes the budgets
    ASSERT_TRUE(r.status.ok()) << r.status.message;
    const std::string what = "trial " + std::to_string(trial);
    for (const PlacementCandidate& c : placement_space(p, {})) {
      above_two += c.chunks_per_device > 2;
      std::vector<std::vector<int>> cuts;
      std::vector<int> counts;
      every_cut(static_cast<int>(p.layers.size()), c.problem.num_stages(), counts, &cuts);
      if (cuts.size() > 40) cuts.resize(40);
      for (const std::vector<int>& cut : cuts) {
        Result<Problem> q = with_partition(c.problem, cut);
        ASSERT_TRUE(q.ok()) << q.status.message;
        for (const Family& f : families()) {
          if (f.placement != c.placement || (!f.takes_any_chunks() && f.chunks_per_device != c.chunks_per_device))
            continue;
          Result<FamilySchedule> fs = build_family(f, q.value, c.chunks_per_device);
          if (!fs.ok()) continue;
          SimResult sim = simulate(fs.value.problem, fs.value.schedule, {.op_times = false});
          ASSERT_TRUE(sim.ok()) << sim.status.message;
          if (!fits_budget(fs.value.problem, sim.timeline)) continue;
          checked++;
          EXPECT_GE(sim.timeline.makespan_us, r.lower_bound_us * (1 - 1e-9)) << what << " " << f.name;
          int64_t most = 0;
          for (int d = 0; d < p.num_devices; d++) {
            EXPECT_GE(sim.timeline.devices[d].peak_bytes, r.budget_lower_bound_bytes[d]) << what << " " << f.name;
            most = std::max(most, sim.timeline.devices[d].peak_bytes);
          }
          EXPECT_GE(most, r.uniform_budget_lower_bound_bytes) << what << " " << f.name;
        }
      }
      OptimizeOptions alone = quick(300, 0, 1);
      alone.rules.placements = {c.placement};
      alone.rules.chunk_counts = {c.chunks_per_device};
      const OptimizeResult e = optimize(p, alone);
      ASSERT_TRUE(e.status.ok()) << e.status.message;
      explicit_runs++;
      if (e.outcome != Outcome::kInfeasible) {
        EXPECT_GE(e.timeline.makespan_us, r.lower_bound_us * (1 - 1e-9)) << what << " " << e.problem.chunks_per_device;
        EXPECT_GE(e.lower_bound_us, r.lower_bound_us * (1 - 1e-9)) << what;  // the space's is the least
      }
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(above_two, 5);
  EXPECT_GT(explicit_runs, 40);
}

// One device is no pipeline (Megatron runs virtual stages only with a pipeline size above 1,
// torchtitan pipelines nothing at degree 1): linear alone is searched unless chunks are asked
// for, and the families on other placements are ruled out, so neither the answer nor the
// baseline takes a placement no framework runs. Fails when chunks are searched on one device.
TEST(Space, OneDeviceSearchesLinearUnlessChunksAreAsked) {
  const Problem p = make_uniform_problem({.num_devices = 1, .num_microbatches = 4, .num_layers = 4});
  const std::vector<PlacementCandidate> space = placement_space(p, {});
  ASSERT_EQ(space.size(), 1u);
  EXPECT_EQ(space[0].placement, Placement::kLinear);
  ScheduleRules four;
  four.chunk_counts = {4};
  const std::vector<PlacementCandidate> asked = placement_space(p, four);
  ASSERT_FALSE(asked.empty());
  for (const PlacementCandidate& c : asked) EXPECT_EQ(c.chunks_per_device, 4);

  std::vector<FamilyRun> runs = run_families(p, {.op_times = false});
  rule_out({}, space, &runs);
  int linear = 0;
  for (const FamilyRun& run : runs) {
    if (run.family->placement == Placement::kLinear) {
      linear += run.status.ok();
      continue;
    }
    EXPECT_FALSE(run.status.ok()) << run.label;
    EXPECT_NE(run.status.message.find("not among the placements searched"), std::string::npos) << run.status.message;
  }
  EXPECT_GT(linear, 2);
  const OptimizeResult r = optimize(p, quick(300, 0, 1));
  ASSERT_TRUE(r.status.ok()) << r.status.message;
  EXPECT_EQ(r.problem.placement, Placement::kLinear);
}
