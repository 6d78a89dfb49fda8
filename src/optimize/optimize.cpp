// The optimizer's driver: the starts (starts.cpp), a race of local searches from the best of them
// (race.cpp) with the bound over the space's placements (placements.cpp), the winner tidied,
// improved by the exact models when asked (exact_driver.cpp), gated, then validated and simulated
// once more for the report.
#include <algorithm>
#include <chrono>
#include <limits>

#include "optimize/budget.h"
#include "optimize/exact_driver.h"
#include "optimize/frugal.h"
#include "optimize/partition.h"
#include "optimize/placements.h"
#include "optimize/race.h"
#include "optimize/search.h"
#include "optimize/starts.h"
#include "optpipe/cp_sat.h"
#include "optpipe/families.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/space.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"

namespace optpipe {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kOptimal: return "optimal";
    case Outcome::kFeasible: return "feasible";
    case Outcome::kInfeasible: return "infeasible";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;

// The search stops at this share of the time limit; what is left tidies its winner. When the
// partition is searched too, the race stops earlier and the rest goes to the partition.
constexpr double kSearchShare = 0.95;
constexpr double kRaceShareBeforePartition = 0.7;
constexpr double kLnsFrom = 0.6;  // with CP-SAT's neighbourhoods: the search's share before them
// The end of the limit: the winner tidied, then its gates pruned; then checked, in time kept
// free for kEndSimulations simulations.
constexpr double kTidyUntil = 0.97;
constexpr double kPruneUntil = 0.99;
constexpr double kEndSimulations = 8;

Status check_options(const OptimizeOptions& options, const NoiseSpec& robust) {
  if (options.threads < 1 || options.threads > 256 || !(options.time_limit_s > 0) || options.max_evaluations < 0)
    return Status::Invalid("optimize: threads must be in [1, 256], time limit > 0, evaluations ≥ 0");
  if (options.robust_sigma == 0) return Status::Ok();
  Status st = check_noise_spec(robust);
  if (st.ok() && robust.samples > 1000)
    st = Status::Invalid("optimize: robust samples must be at most 1000, got " + std::to_string(robust.samples));
  return st;
}

// The winner gated (with any_timing), checked and simulated once more, the way everything optpipe
// reports is; then its figures, bound, gap and outcome. `cut_proof_us`: a bound the exact models
// proved for the answer's own cut alone (0: none).
void finish(const OptimizeOptions& options, Clock::time_point prune_until, const Placements& placements,
            double cut_proof_us, OptimizeResult& out) {
  // The partition travels with the schedule, so that it is read back on the problem it was made for.
  out.schedule.items_per_stage = layers_match(out.problem) ? items_per_stage(out.problem) : std::vector<int>{};
  double ungated_us = 0;
  if (options.any_timing) {
    SimResult nominal = simulate(out.problem, out.schedule, {.op_times = true, .any_timing = false});
    OPTPIPE_CHECK(nominal.ok(), "the optimizer's winner must simulate: " + nominal.status.message);
    Gated gated = gate_for_any_timing(out.problem, out.schedule, nominal.timeline, prune_until);
    // Gates hold at nominal timings, but on a shared host link a reload they make ready later can
    // lose a tie for the link that it won (first come, first served). Pruning takes back the
    // gates memory does not need; where the deadline cut it short and the gates cost time, it
    // runs once more for a short while. What cost remains is read off the validated timeline.
    ungated_us = objective_us(nominal.timeline, options.objective);
    if (Clock::now() >= prune_until) {
      auto gated_us = [&](const Gated& g) {
        return objective_us(simulate(out.problem, g.schedule, {.op_times = false, .any_timing = false}).timeline,
                            options.objective);
      };
      const double first_us = gated_us(gated);
      if (first_us > ungated_us) {
        const double extra_s = std::clamp(0.02 * options.time_limit_s, 0.01, 0.5);
        Gated again =
            gate_for_any_timing(out.problem, out.schedule, nominal.timeline, seconds_after(Clock::now(), extra_s));
        if (gated_us(again) < first_us) gated = std::move(again);
      }
    }
    out.schedule = std::move(gated.schedule);
    out.stats.waits_added = gated.waits_added;
    out.stats.reload_gates_added = gated.reload_gates_added;
  }
  Validation v = validate(out.problem, out.schedule,
                          {.check_memory_budget = false, .sim = {.op_times = true, .memory_curve = true}});
  OPTPIPE_CHECK(v.ok(), "the optimizer produced an invalid schedule: " + v.summary());
  const Status kept = check_rules(options.rules, out.problem, out.schedule);
  OPTPIPE_CHECK(kept.ok(), "the optimizer broke its rules: " + kept.message);
  out.timeline = std::move(v.sim.timeline);
  if (options.any_timing)
    out.stats.gating_cost_us = std::max(0.0, objective_us(out.timeline, options.objective) - ungated_us);
  out.needed_budget_bytes.clear();  // finish runs again when a step is undone
  for (const DeviceFigures& f : out.timeline.devices)
    out.needed_budget_bytes.push_back(options.any_timing ? f.worst_peak_bytes : f.peak_bytes);
  const bool fits =
      options.any_timing ? fits_any_timing(out.problem, out.timeline) : fits_budget(out.problem, out.timeline);
  const double bound_us = placements.bound();
  out.lower_bound_us = bound_us;
  out.placement_lower_bound_us = placements.bound_of(out.problem);
  const double value = objective_us(out.timeline, options.objective);
  auto gap_to = [&](double bound) { return value > 0 ? std::max(0.0, (value - bound) / value) : 0; };
  out.gap = gap_to(bound_us);
  out.placement_gap = gap_to(out.placement_lower_bound_us);
  // The answer's own cut's bound: lower_bound_for on its problem, and the exact models' proofs for
  // it, hold for that cut alone.
  out.cut_lower_bound_us =
      std::max({out.placement_lower_bound_us, cut_proof_us,
                fits ? lower_bound_for(out.problem, true, options.objective, options.rules) : 0.0});
  out.cut_gap = gap_to(out.cut_lower_bound_us);
  out.outcome = !fits ? Outcome::kInfeasible : value <= bound_us * (1 + 1e-12) ? Outcome::kOptimal : Outcome::kFeasible;
}

// After the race: the winner's partition improved by moving layers between stages, the order
// searched again on each moved partition, until neither improves, the deadline, or
// max_evaluations candidates.
void search_partition(const OptimizeOptions& options, bool by_time, int64_t max_evaluations, Clock::time_point deadline,
                      const NoiseSamples* noise, Problem* problem, SearchResult* searched, OptimizeStats* stats) {
  const Scoring scoring{options.objective, noise};
  if (by_time) max_evaluations = std::numeric_limits<int64_t>::max();
  const int64_t slice =
      std::clamp<int64_t>(static_cast<int64_t>(2e7 / std::max<size_t>(searched->best.num_ops(), 1)), 50, 20000);
  int64_t spent = 0;
  for (int round = 0; round < 64 && spent < max_evaluations && Clock::now() < deadline; round++) {
    Repartitioned moved =
        improve_partition(*problem, searched->best, searched->best_score, scoring, max_evaluations - spent, deadline);
    spent += moved.evaluations;
    if (moved.moves > 0) {
      *problem = std::move(moved.problem);
      searched->best_score = moved.score;
      stats->partition_moves += moved.moves;
    }
    SearchShared shared;
    shared.deadline = deadline;
    SearchResult more = local_search(*problem, searched->best, options.seed * 7907 + static_cast<uint64_t>(round),
                                     std::min(slice, max_evaluations - spent), shared, scoring, options.rules);
    spent += more.evaluations;
    stats->evaluations += more.evaluations;
    const bool order_improved = more.best_score < searched->best_score;
    if (order_improved) {
      searched->best = std::move(more.best);
      searched->best_score = more.best_score;
      stats->improvements += more.improvements;
    }
    if (moved.moves == 0 && !order_improved) break;
  }
}

}  // namespace

OptimizeStats::Baseline baseline_of(const FamilyRun* run, Objective objective) {
  if (!run) return {};
  return {.label = run->label,
          .makespan_us = run->timeline.makespan_us,
          .objective_us = objective_us(run->timeline, objective),
          .idle_us = run->timeline.idle_us};
}

OptimizeResult optimize(const Problem& p, const OptimizeOptions& options) {
  OptimizeResult out;
  const Clock::time_point t0 = Clock::now();
  const NoiseSpec robust{
      .jitter_sigma = options.robust_sigma, .samples = options.robust_samples, .seed = options.seed + 1};
  out.status = check_problem(p);
  if (out.status.ok()) out.status = check_no_recompute_layers(p);
  if (out.status.ok()) out.status = check_options(options, robust);
  if (out.status.ok()) out.status = check_rules_options(options.rules);
  if (!out.status.ok()) return out;

  // The space searched, once; then the frugal schedules on it: what the leanest of them needs is
  // the budget above which the answer always fits (it is a start, and nothing after it loses a
  // fitting schedule).
  const std::vector<PlacementCandidate> space = placement_space(p, options.rules);
  if (space.empty()) {
    out.status = Status::Invalid("no placement the rules allow (" + options.rules.describe() +
                                 ") can be cut from this problem: its layers allow 1 to " +
                                 std::to_string(max_chunks_per_device(p)) +
                                 " chunks per device (a chunk holds one layer at least)");
    return out;
  }
  for (const PlacementCandidate& c : space)
    out.stats.placements_searched.push_back(placement_label(c.placement, c.chunks_per_device));
  const std::vector<Frugal> frugal = frugal_schedules(space, options.rules);
  const bool partition_free = !options.rules.fixed_partition && layers_match(p);
  out.status = static_memory_status(p, options.rules);
  if (!out.status.ok()) return out;
  if (const Frugal* lean = leanest(frugal, p)) {
    out.frugal_label = lean->name;
    out.frugal_budget_bytes = lean->need_bytes;
    out.frugal_makespan_us = lean->makespan_us;
  }
  out.budget_lower_bound_bytes = space_budget_lower_bound(p, space, partition_free);
  out.uniform_budget_lower_bound_bytes = uniform_budget_lower_bound(p, out.budget_lower_bound_bytes, partition_free);
  // Every family that applies, then greedy schedules, each scored; then repairs of those that
  // overflow; the best first. Every family is built and checked whatever the time limit (that is
  // cheap, and the answer must never be slower than a family that fits) — unless the families
  // alone outlast the limit by a quarter second, on problems so large that the rest are left out;
  // their practitioner tunings, dearer, are started within 40% of the limit or not at all.
  auto after = [&](double share) { return seconds_after(t0, options.time_limit_s * share); };
  // The starts beyond the families (on other cuts, greedy) end by a quarter of the limit, the
  // repairs and the bounds over every partition by half, the raced starts' partition moves a
  // tenth later: the repairs can fill their half (llama2-70b at 10 s: 387 of them, none better
  // after the second), and with no time for the moves its gap was 2.8%, with this 1.4%.
  const Clock::time_point starts_until = after(0.25), repairs_until = after(0.5), moves_until = after(0.6);
  const std::vector<int> interleaved = interleaved_chunk_counts(space);
  std::vector<FamilyRun> runs = options.families ? *options.families
                                                 : run_families(p, {.op_times = false, .any_timing = false},
                                                                after(1) + std::chrono::milliseconds(250), interleaved,
                                                                after(kTuningsShareOfLimit));
  rule_out(options.rules, space, &runs);
  out.stats.best_family = baseline_of(fastest_fitting(runs, options.objective), options.objective);
  out.stats.best_published_family =
      baseline_of(fastest_fitting(runs, options.objective, /*as_published_only=*/true), options.objective);
  // With the partition free, the cut that balances each device's load (PartitionRule::kDevices)
  // rather than each stage's: the families run on it too (starts, not baselines, so left out when
  // the families took the first quarter of the limit), and a wave's greedy starts take it.
  const bool devices_cut = partition_free && p.partition == PartitionRule::kBalanced;
  Problem level = p;
  level.partition = PartitionRule::kDevices;
  if (devices_cut && Clock::now() < starts_until) {
    std::vector<FamilyRun> leveled =
        run_families(level, {.op_times = false, .any_timing = false}, starts_until, interleaved);
    rule_out(options.rules, space, &leveled);
    for (FamilyRun& run : leveled)
      if (run.status.ok() &&
          items_per_stage(run.built.problem) !=
              items_per_stage(rechunk(p, run.built.problem.placement, run.built.problem.chunks_per_device).value)) {
        run.label += " [devices]";
        runs.push_back(std::move(run));
      }
  }
  // ... and on the cuts the bound over every partition points to for the V-shape and two
  // interleaved chunks (bound_guided_cuts).
  // The bound over every partition they compute on the way is kept for the search's placements.
  std::vector<FreeBound> free_bounds;
  if (partition_free && Clock::now() < starts_until) {
    for (const PlacementCandidate& c : space) {
      if (c.chunks_per_device != 2 || c.placement == Placement::kWave) continue;
      const BoundGuidedCuts guided = bound_guided_cuts(c.problem, starts_until, options.rules);
      if (guided.free_bound_complete) free_bounds.push_back({c.placement, 2, guided.free_bound_us});
      for (const std::vector<int>& cut : guided.cuts) {
        Result<Problem> cut_problem = with_partition(c.problem, cut);
        if (!cut_problem.ok() || Clock::now() > starts_until) continue;
        std::vector<FamilyRun> on_cut =
            run_families_on_cut(cut_problem.value, {.op_times = false, .any_timing = false}, starts_until);
        rule_out(options.rules, space, &on_cut);
        for (FamilyRun& run : on_cut) {
          run.label += " [bound cut]";
          runs.push_back(std::move(run));
        }
      }
    }
  }
  // A wave's per-stage balanced cut leaves its heavy stages together on a few devices (llama2-13b,
  // wave v4: devices 6 and 7 with 11.8 s of work against device 0's 9.0 s).
  std::vector<PlacementCandidate> start_space = space;
  for (PlacementCandidate& c : start_space)
    if (devices_cut && c.placement == Placement::kWave)
      if (Result<Problem> cut = rechunk(level, c.placement, c.chunks_per_device); cut.ok())
        c.problem = std::move(cut.value);
  bool out_of_time = false;
  std::vector<Start> starts = make_starts(p, start_space, frugal, runs, options.rules, options.objective, starts_until,
                                          repairs_until, &out_of_time);
  if (starts.empty()) {  // every placement's re-cut of this problem breaks its limits
    std::string why;
    for (const FamilyRun& run : runs)
      if (!run.status.ok() && why.find(run.status.message) == std::string::npos) why += "\n  " + run.status.message;
    out.status = Status::Infeasible("no schedule family and no greedy schedule applies to this problem" +
                                    (options.rules.any() ? " under the rules (" + options.rules.describe() + ")" : "") +
                                    ":" + why);
    return out;
  }

  // The steps after the search take time that grows with the schedule: a few simulations of the
  // first start under any timing, timed once here, are kept free at the end of the limit (at
  // most a fifth of it).
  const Clock::time_point timed_from = Clock::now();
  const SimResult timed =
      simulate(starts[0].built.problem, starts[0].built.schedule, {.op_times = true, .any_timing = true});
  OPTPIPE_CHECK(timed.ok(), "a start must simulate: " + timed.status.message);
  const double end_reserve_s = std::min(0.2 * options.time_limit_s, kEndSimulations * seconds_since(timed_from));
  const double search_limit_s = options.time_limit_s - end_reserve_s;
  auto before_end = [&](double share) { return seconds_after(t0, search_limit_s * share); };

  // The best few starts are searched; the lower bound holds over every placement among them.
  const int num_searches = std::min<int>(std::max(options.threads, 8), static_cast<int>(starts.size()));
  // The partition is searched too when it is free and the starts' problems carry their layers.
  const bool repartition =
      !options.rules.fixed_partition && std::any_of(starts.begin(), starts.begin() + num_searches,
                                                    [](const Start& s) { return layers_match(s.built.problem); });
  // Each raced start on the partition its own schedule runs best on (layers moved off the
  // devices its order leaves busiest).
  for (int k = 0; k < num_searches && repartition; k++) {
    Start& start = starts[k];
    if (!layers_match(start.built.problem)) continue;
    Repartitioned moved = improve_partition(start.built.problem, start.built.schedule, start.score,
                                            {options.objective, nullptr}, 4000, moves_until);
    if (moved.moves == 0) continue;
    start.name += " +partition";
    start.built.problem = std::move(moved.problem);
    start.score = moved.score;
    out.stats.partition_moves += moved.moves;
  }
  // The search runs until its share of the time limit, unless the run has a budget (repeatable
  // runs) or --exact without CP-SAT (whose models get the time left). With CP-SAT, --exact leaves
  // it the second half.
  const bool exact_by_time = options.exact && exact_uses_cp_sat(starts[0].built.problem, options);
  const bool by_time = options.max_evaluations == 0 && (!options.exact || exact_by_time);
  // Without --exact, CP-SAT's neighbourhoods take the search's last third where they apply.
  const bool lns = by_time && !options.exact && lns_applies(starts[0].built.problem, options);
  const double search_share = exact_by_time ? 0.5 : lns ? kLnsFrom : kSearchShare;
  const double race_share = repartition ? search_share * kRaceShareBeforePartition / kSearchShare : search_share;
  Placements placements =
      placements_of(starts, num_searches, space, options.exact, options.robust_sigma > 0 ? &robust : nullptr,
                    options.objective, options.rules, repartition, free_bounds, repairs_until);
  const size_t ops = starts[0].built.schedule.num_ops();
  RaceSetup race{.starts = &starts,
                 .num_searches = num_searches,
                 .threads = options.threads,
                 .seed = options.seed,
                 .budget =
                     options.max_evaluations > 0
                         ? options.max_evaluations
                         : std::clamp<int64_t>(static_cast<int64_t>(2e8 / std::max<size_t>(ops, 1)), 2000, 300000),
                 .until_time = by_time,
                 .t0 = t0,
                 .stop_after_s = search_limit_s * race_share,
                 .bound_us = placements.bound(),
                 .noise_for = [&](const Problem& sp) { return placements.noise_for(sp); },
                 .progress = options.progress,
                 .rules = options.rules,
                 .objective = options.objective};
  RaceOutcome raced = race_searches(race);
  out.stats.stopped_by_time = out_of_time || raced.stopped_by_time;
  out.stats.evaluations = raced.best.evaluations;
  out.stats.improvements = raced.best.improvements;
  const Start& st = starts[raced.start];
  out.stats.start_family = st.name;
  out.stats.start_objective_us = st.score.objective_us;

  out.problem = st.built.problem;
  // The answer's cut travels as its items per stage; the rule it names stays the caller's, so that
  // the plan file reads back against the caller's problem (a start on the device-balanced or even
  // cut carries that rule).
  out.problem.partition = p.partition;
  SearchResult searched = raced.best;
  if (repartition && layers_match(out.problem))
    search_partition(options, by_time, race.budget / 4, before_end(search_share), placements.noise_for(out.problem),
                     &out.problem, &searched, &out.stats);
  double cut_proof_us = 0;  // a bound for out.problem's partition alone
  if (lns) {
    const double bound_us =
        run_lns(options, out.problem, placements.bound(), before_end(kSearchShare), &searched, &out.stats);
    // Its bound holds for the problem's partition only.
    if (!repartition) placements.raise_bound(out.problem, bound_us);
    cut_proof_us = bound_us;
    // What CP-SAT gave back (it stops early where the whole model improves nothing) goes to the
    // local search, from the winner.
    if (Clock::now() < before_end(kSearchShare) &&
        searched.best_score.objective_us > placements.bound() * (1 + 1e-12)) {
      SearchShared shared;
      shared.deadline = before_end(kSearchShare);
      SearchResult more = local_search(out.problem, searched.best, options.seed + 1, race.budget, shared,
                                       {options.objective, nullptr}, options.rules);
      out.stats.evaluations += more.evaluations;
      out.stats.improvements += more.improvements;
      if (more.best_score < searched.best_score) searched = std::move(more);
    }
  }
  // What the search's plateau walk left behind and the winner does not need (in the time the
  // search left, or as many simulations as the schedule's size allows when it did not bind).
  Tidied tidied =
      drop_needless(out.problem, searched.best,
                    std::clamp<int64_t>(static_cast<int64_t>(4e7 / std::max<size_t>(ops, 1)), 100, 5000),
                    before_end(kTidyUntil), placements.noise_for(out.problem), options.rules, options.objective);
  out.schedule = tidied.schedule;
  out.stats.recomputes_dropped = tidied.recomputes_dropped;
  out.stats.offloads_dropped = tidied.offloads_dropped;
  if (options.exact) {
    const std::vector<double> free_bounds = placements.bounds;
    run_exact(options, t0, &placements.problems, &placements.bounds, &out);
    // The exact models' bounds hold for their problem's partition only: the answer's where it is
    // that placement's.
    for (size_t k = 0; k < placements.problems.size(); k++)
      if (same_placement(*placements.problems[k], out.problem) &&
          items_per_stage(*placements.problems[k]) == items_per_stage(out.problem))
        cut_proof_us = std::max(cut_proof_us, placements.bounds[k]);
    if (repartition) placements.bounds = free_bounds;
  }
  finish(options, before_end(kPruneUntil), placements, cut_proof_us, out);
  // Every step after the search keeps a fitting answer fitting, or is undone: the tidied schedule
  // without the exact models' change, then the search's own winner.
  const bool search_fits = searched.best_score.overflow_bytes == 0;
  for (const Schedule* undo : {&tidied.schedule, &searched.best}) {
    if (!search_fits || out.outcome != Outcome::kInfeasible) break;
    out.schedule = *undo;
    if (undo == &searched.best) out.stats.recomputes_dropped = out.stats.offloads_dropped = 0;
    finish(options, before_end(kPruneUntil), placements, cut_proof_us, out);
  }
  // The invariant: a fitting candidate means a fitting answer, no slower than that candidate.
  OPTPIPE_CHECK(!search_fits || out.outcome != Outcome::kInfeasible,
                "the search found a schedule that fits, yet the answer does not");
  OPTPIPE_CHECK(!search_fits || options.robust_sigma > 0 ||
                    objective_us(out.timeline, options.objective) <=
                        searched.best_score.objective_us * (1 + 1e-9) + 1e-6 + out.stats.gating_cost_us,
                "the answer is slower than the best fitting schedule the search found");
  if (out.outcome == Outcome::kInfeasible) out.would_help = what_would_help(p, options.rules);
  out.stats.wall_s = seconds_since(t0);
  if (options.progress)
    options.progress({out.stats.wall_s, out.stats.evaluations,
                      out.outcome != Outcome::kInfeasible ? objective_us(out.timeline, options.objective) : 0,
                      out.lower_bound_us});
  return out;
}

}  // namespace optpipe
