// The optimizer's driver: every family and greedy schedule as a start (offloaded and repaired
// where it overflows), a race of local searches from the best of them, then the winner validated
// and simulated once more for the report.
#include <algorithm>
#include <chrono>
#include <exception>
#include <set>
#include <thread>

#include "optimize/list_scheduler.h"
#include "optimize/by_start.h"
#include "optimize/search.h"
#include "optpipe/any_timing.h"
#include "optpipe/cp.h"
#include "optpipe/milp.h"
#include "optpipe/noise.h"
#include "optpipe/families.h"
#include "optpipe/figures.h"
#include "optpipe/optimize.h"
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

// Beyond this many order binaries CBC rarely closes the gap within seconds (proving 8 devices ×
// 32 microbatches optimal was measured at 45 s); the heuristics carry such problems alone.
constexpr size_t kMaxExactBinaries = 4000;
// The search stops at this share of the time limit; what is left tidies its winner.
constexpr double kSearchShare = 0.95;

struct Start {
  std::string name;  // the family, or the greedy rule, it comes from
  FamilySchedule built;
  Score score;
};

constexpr size_t kLargeScheduleOps = 20000;
constexpr int kSettleRounds = 64;  // simulations to hold a start's transfers until it fits

// A start, scored; when it overflows the budget (and there is time), also the same order with
// every activation offloaded whose lifespan covers the round trip, which often fits outright,
// with reloads issued two and four reload times ahead (the later ones wait less on a busy link).
// `scored`: its score when it has been simulated already.
void add_start(const std::string& name, FamilySchedule built, Clock::time_point deadline, std::vector<Start>* starts,
               const Score* scored = nullptr) {
  Score sc;
  if (scored)
    sc = *scored;
  else if (!score_schedule(built.problem, built.schedule, &sc))
    return;
  for (int lead : {2, 4}) {
    if (sc.overflow_bytes == 0 || Clock::now() > deadline) break;
    Schedule offloaded = add_offloads(built.problem, built.schedule, lead);
    Score os;
    if (score_schedule(built.problem, offloaded, &os) && os < sc)
      starts->push_back({name + " +offload" + (lead == 2 ? "" : "(lead 4)"), {built.problem, std::move(offloaded)}, os});
  }
  starts->push_back({name, std::move(built), sc});
}

// Greedy list schedules on the common placements, under activation limits from what an
// unconstrained pipeline keeps down to one per device: starts for every budget in between. The
// largest limits come first, on every placement, as they are the fastest once offloaded.
void add_greedy_starts(const Problem& p, Clock::time_point deadline, bool* out_of_time, std::vector<Start>* starts) {
  struct Placed {
    Placement placement;
    int v;
    Result<Problem> problem;
    std::vector<int> limits;  // descending
  };
  std::vector<Placed> placed;
  size_t most_limits = 0;
  for (const auto& [placement, v] : {std::pair{Placement::kLinear, 1}, {Placement::kVShape, 2}, {Placement::kInterleaved, 2}}) {
    Placed pl{placement, v, rechunk(p, placement, v), {}};
    if (!pl.problem.ok()) continue;
    const int most = std::min(p.num_microbatches * v, 2 * p.num_devices * v);
    for (int k = 1;; k = std::min(most, k + std::max(1, k / 2))) {
      pl.limits.insert(pl.limits.begin(), k);
      if (k == most) break;
    }
    most_limits = std::max(most_limits, pl.limits.size());
    placed.push_back(std::move(pl));
  }
  for (size_t i = 0; i < most_limits; i++) {
    for (const Placed& pl : placed) {
      if (i >= pl.limits.size()) continue;
      for (bool split : {true, false}) {
        if (Clock::now() > deadline) {
          *out_of_time = true;
          return;
        }
        ListRules rules;
        rules.max_live.assign(p.num_devices, pl.limits[i]);
        rules.split_backward = split;
        Result<Schedule> s = list_schedule(pl.problem.value, rules);
        if (!s.ok()) continue;
        add_start(std::string("greedy ") + placement_name(pl.placement) + " v" + std::to_string(pl.v) + " live≤" +
                      std::to_string(pl.limits[i]) + (split ? "" : " fused"),
                  {pl.problem.value, std::move(s.value)}, deadline, starts);
      }
    }
  }
}

bool has_offloads(const Schedule& s) {
  for (const DeviceSchedule& ds : s.devices)
    if (!ds.offloads.empty()) return true;
  return false;
}

// The starts that still overflow, the fastest first, until the deadline: the same order with
// its transfers held until there is room, if that fits; and with activations offloaded or
// recomputed at every remaining peak.
void add_repaired_starts(Clock::time_point deadline, bool* out_of_time, std::vector<Start>* starts) {
  std::vector<size_t> over;
  for (size_t i = 0; i < starts->size(); i++)
    if ((*starts)[i].score.overflow_bytes > 0) over.push_back(i);
  std::stable_sort(over.begin(), over.end(), [&](size_t a, size_t b) {
    return (*starts)[a].score.makespan_us < (*starts)[b].score.makespan_us;
  });
  for (size_t i : over) {
    if (Clock::now() > deadline) {
      *out_of_time = true;
      return;
    }
    // With offloads, first without any change of fate: an F, R or reload that overflows waits
    // for an offload in flight to make room (WAIT, `after`), or a reload for the compute op
    // running, or is issued later. If that fits, it is a start; if it only overflows less, it
    // is repaired too, beside the original.
    std::vector<Start> to_repair;
    to_repair.push_back((*starts)[i]);
    if (has_offloads(to_repair[0].built.schedule) && to_repair[0].built.schedule.num_ops() <= kLargeScheduleOps) {
      Start settled{to_repair[0].name + " +settle", to_repair[0].built, {}};
      const bool fits = settle_transfers(settled.built.problem, kSettleRounds, &settled.built.schedule);
      if (score_schedule(settled.built.problem, settled.built.schedule, &settled.score) && settled.score < to_repair[0].score)
        (fits ? *starts : to_repair).push_back(std::move(settled));
    }
    for (const Start& st : to_repair) {
      const int max_rounds = 4 * st.built.problem.num_microbatches;  // simulations
      // Fixing one peak per simulation needs too many simulations of a large schedule to finish
      // in the time limit (D=32, M=256: ~90% of 10 s); there every overflow is fixed per round.
      const bool every_overflow = st.built.schedule.num_ops() > kLargeScheduleOps;
      Start repaired{st.name + " +repair",
                     {st.built.problem, repair_memory(st.built.problem, st.built.schedule, max_rounds, every_overflow, deadline)},
                     {}};
      if (score_schedule(repaired.built.problem, repaired.built.schedule, &repaired.score) && repaired.score < st.score)
        starts->push_back(std::move(repaired));
    }
  }
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The exact models on small problems, in the time left. To improve the winner in its placement:
// the CP model and the MILP with the budget, both deciding offloads and recomputes (the MILP
// warm-started from the winner when it has no offloads and each R sits just before its B); a
// faster solution that fits replaces it. To prove bounds in every placement searched whose simple bound
// is below the winner: the CP model without the budget, then, if it did not finish, the MILP's
// relaxation — both hold for every schedule of the placement, offloads and recomputes included.
void run_exact(const OptimizeOptions& options, Clock::time_point t0, const std::vector<const Problem*>* problems,
               std::vector<double>* bounds, OptimizeResult* out) {
  Score current;
  OPTPIPE_CHECK(score_schedule(out->problem, out->schedule, &current), "the winner must simulate");
  std::vector<size_t> open;
  for (size_t k = 0; k < problems->size(); k++)
    if ((*bounds)[k] < current.makespan_us * (1 - 1e-12)) open.push_back(k);
  if (open.empty()) return;  // already proven optimal
  const double share = (options.time_limit_s - seconds_since(t0)) / (2 + 2 * open.size());
  if (share < 0.05) return;
  auto consider = [&](const Status& st, Schedule& candidate, const char* how) {
    Score sc;
    if (st.ok() && score_schedule(out->problem, candidate, &sc) && sc < current) {
      current = sc;
      out->schedule = std::move(candidate);
      out->stats.start_family += how;
    }
  };
  CpSolution cp = solve_cp(out->problem, {.memory = true, .time_limit_s = share, .recompute = true, .offload = true});
  out->stats.exact_solves++;
  out->stats.exact_nodes += cp.nodes;
  consider(cp.status, cp.schedule, " +cp");
  const MilpOptions budgeted{
      .memory = true, .time_limit_s = share, .threads = options.threads, .recompute = true, .offload = true};
  // Sized from the problem before anything is built: a model can run to millions of binaries.
  Result<MilpModel> model = milp_min_binaries(out->problem) <= kMaxExactBinaries
                                ? build_milp(out->problem, budgeted)
                                : Result<MilpModel>::Error(Status::Invalid("too large for the MILP"));
  if (model.ok() && model.value.num_binaries() <= kMaxExactBinaries) {
    MilpSolution sol = solve_milp(out->problem, model.value, budgeted, &out->schedule);
    out->stats.exact_solves++;
    out->stats.exact_nodes += sol.nodes;
    consider(sol.status, sol.schedule, " +milp");
  }
  for (size_t k : open) {
    const Problem& pk = *(*problems)[k];
    CpSolution relaxed = solve_cp(pk, {.memory = false, .time_limit_s = share});
    out->stats.exact_solves++;
    out->stats.exact_nodes += relaxed.nodes;
    if (relaxed.bound_us > (*bounds)[k]) (*bounds)[k] = relaxed.bound_us;
    if (relaxed.proven_optimal) continue;
    if (milp_min_binaries(pk) > kMaxExactBinaries) continue;
    Result<MilpModel> m = build_milp(pk, {.memory = false});
    if (!m.ok() || m.value.num_binaries() > kMaxExactBinaries) continue;
    MilpSolution sol = solve_milp(pk, m.value, {.memory = false, .time_limit_s = share, .threads = options.threads}, nullptr);
    out->stats.exact_solves++;
    out->stats.exact_nodes += sol.nodes;
    if (sol.bound_us > (*bounds)[k]) (*bounds)[k] = sol.bound_us;
  }
}

}  // namespace

OptimizeResult optimize(const Problem& p, const OptimizeOptions& options) {
  OptimizeResult out;
  const Clock::time_point t0 = Clock::now();
  out.status = check_problem(p);
  if (!out.status.ok()) return out;
  if (options.threads < 1 || options.threads > 256 || !(options.time_limit_s > 0) || options.max_evaluations < 0) {
    out.status = Status::Invalid("optimize: threads must be in [1, 256], time limit > 0, evaluations ≥ 0");
    return out;
  }
  const NoiseSpec robust{.jitter_sigma = options.robust_sigma, .samples = options.robust_samples, .seed = options.seed + 1};
  if (options.robust_sigma != 0) {
    out.status = check_noise_spec(robust);
    if (out.status.ok() && robust.samples > 1000)
      out.status = Status::Invalid("optimize: robust samples must be at most 1000, got " + std::to_string(robust.samples));
    if (!out.status.ok()) return out;
  }

  // Every family that applies, then greedy schedules, each scored; then repairs of those that
  // overflow; the best first. Every family is built and checked whatever the time limit (that is
  // cheap, and the answer must never be slower than a family that fits) — unless the families
  // alone outlast the limit by a quarter second, on problems so large that the rest are left out;
  // the greedy starts take at most a quarter of it, the repairs what is left of the first half.
  auto after = [&](double share) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.time_limit_s * share));
  };
  const Clock::time_point deadline = after(0.5);
  std::vector<FamilyRun> runs = run_families(p, {.op_times = false, .any_timing = false}, after(1) + std::chrono::milliseconds(250));
  if (const FamilyRun* best = fastest_fitting(runs)) {
    out.stats.baseline_family = best->family->name;
    out.stats.baseline_makespan_us = best->timeline.makespan_us;
    out.stats.baseline_idle_us = best->timeline.idle_us;
  }
  std::vector<Start> starts;
  for (FamilyRun& run : runs)
    if (run.status.ok()) {
      const Score scored = score_of(run.built.problem, run.timeline);
      add_start(run.family->name, std::move(run.built), deadline, &starts, &scored);
    }
  bool out_of_time = Clock::now() > deadline;
  if (!out_of_time) add_greedy_starts(p, after(0.25), &out_of_time, &starts);
  if (starts.empty()) {  // every placement's re-cut of this problem breaks its limits
    std::string why;
    for (const FamilyRun& run : runs)
      if (!run.status.ok() && why.find(run.status.message) == std::string::npos) why += "\n  " + run.status.message;
    out.status = Status::Infeasible("no schedule family and no greedy schedule applies to this problem:" + why);
    return out;
  }
  add_repaired_starts(deadline, &out_of_time, &starts);
  out.stats.stopped_by_time = out_of_time;
  std::stable_sort(starts.begin(), starts.end(), [](const Start& a, const Start& b) { return a.score < b.score; });
  // The best start of each kind (placement; split or fused backwards) first, then the rest: how
  // well a start scores says little of how far the search takes it, and one kind's offloaded and
  // repaired twins must not crowd the others out of the search.
  {
    std::vector<Start> firsts, rest;
    std::set<std::string> kinds;
    for (Start& st : starts) {
      bool fused = false;
      for (const DeviceSchedule& ds : st.built.schedule.devices)
        for (const Op& op : ds.compute) fused = fused || op.kind == OpKind::kBW;
      const std::string kind = std::string(placement_name(st.built.problem.placement)) + (fused ? " fused" : " split");
      (kinds.insert(kind).second ? firsts : rest).push_back(std::move(st));
    }
    for (Start& st : rest) firsts.push_back(std::move(st));
    starts = std::move(firsts);
  }

  // The best few starts are searched; the lower bound holds over every placement among them.
  const int threads = options.threads;
  const int num_searches = std::min<int>(std::max(threads, 8), static_cast<int>(starts.size()));
  std::vector<const Problem*> placement_problems;  // parallel to stats.placements_searched
  std::vector<double> placement_bounds;
  for (int k = 0; k < num_searches; k++) {
    const Problem& sp = starts[k].built.problem;
    const std::string where = std::string(placement_name(sp.placement)) + " v" + std::to_string(sp.chunks_per_device);
    std::vector<std::string>& seen = out.stats.placements_searched;
    if (std::find(seen.begin(), seen.end(), where) != seen.end()) continue;
    seen.push_back(where);
    placement_problems.push_back(&sp);
    placement_bounds.push_back(makespan_lower_bound(sp));
  }
  auto overall_bound = [&] { return *std::min_element(placement_bounds.begin(), placement_bounds.end()); };
  // With robust_sigma: each placement's samples, drawn once, so every candidate meets the same.
  std::vector<NoiseSamples> placement_noise(placement_problems.size());
  if (options.robust_sigma > 0)
    for (size_t k = 0; k < placement_problems.size(); k++) {
      const NoiseSampler sampler(*placement_problems[k], robust);
      placement_noise[k].resize(robust.samples);
      for (int i = 0; i < robust.samples; i++) sampler.draw(i, &placement_noise[k][i]);
    }
  auto noise_for = [&](const Problem& sp) -> const NoiseSamples* {
    if (options.robust_sigma <= 0) return nullptr;
    for (size_t k = 0; k < placement_problems.size(); k++)
      if (placement_problems[k]->placement == sp.placement && placement_problems[k]->chunks_per_device == sp.chunks_per_device)
        return &placement_noise[k];
    OPTPIPE_CHECK(false, "every raced start's placement has its samples");
    return nullptr;
  };
  double bound = overall_bound();

  // Each thread takes its share of those starts (thread k takes starts k, k+T, ...) and races
  // them by successive halving: every search runs a slice, the better half goes on from where it
  // stands with twice the slice, until one is left. A start that looks worse early but improves
  // faster is not dropped after one short look.
  const size_t ops = starts[0].built.schedule.num_ops();
  const int64_t budget = options.max_evaluations > 0
                             ? options.max_evaluations
                             : std::clamp<int64_t>(static_cast<int64_t>(2e8 / std::max<size_t>(ops, 1)), 2000, 300000);
  const bool until_time = options.max_evaluations == 0 && !options.exact;
  SearchShared shared;
  std::atomic<int> finished{0};
  std::vector<SearchResult> results(threads);
  std::vector<int> result_start(threads, 0);
  // Thread k's share of the starts, raced. An exception in it (a broken invariant, memory) stops
  // the others and is rethrown here once every thread has joined: an internal error with its
  // message, never a silent terminate.
  auto run_races = [&](int k) {
    struct Racer {
      int start;
      SearchResult result;
    };
    std::vector<Racer> racers;
    for (int i = k; i < num_searches; i += threads) racers.push_back({i, {}});
    if (racers.empty()) racers.push_back({0, {}});
    for (Racer& r : racers) {
      r.result.best = starts[r.start].built.schedule;
      r.result.best_score = starts[r.start].score;
      if (const NoiseSamples* noise = noise_for(starts[r.start].built.problem))
        OPTPIPE_CHECK(score_schedule(starts[r.start].built.problem, r.result.best, &r.result.best_score, noise),
                      "a start must simulate");
    }
    int rounds = 1;
    while ((size_t{1} << (rounds - 1)) < racers.size()) rounds++;
    int64_t evaluations = 0, improvements = 0;
    const uint64_t seed = options.seed * 1000003 + static_cast<uint64_t>(k) * 7919;
    // One race spends the budget; without a budget of its own (and with no exact models to
    // leave time for) the search races again with twice the budget, every start going on from
    // where it stood, until the time limit or a proven optimum stops it. A start dropped early
    // gets a longer look in the next race. Then the first race is small, so that several fit
    // in the limit.
    int64_t race_budget = until_time ? std::max<int64_t>(1, budget / 8) : budget;
    for (uint64_t race = 0; race == 0 || (until_time && !shared.stop); race++, race_budget *= 2) {
      std::vector<Racer*> field;
      for (Racer& r : racers) field.push_back(&r);
      // Each round spends about the same share: n searches × slice, then n/2 × 2·slice, ...
      int64_t slice = std::max<int64_t>(1, race_budget / rounds / static_cast<int64_t>(field.size()));
      for (int round = 0; round < rounds && !shared.stop; round++) {
        for (Racer* r : field) {
          const Problem& sp = starts[r->start].built.problem;
          SearchResult more = local_search(sp, r->result.best,
                                           seed + static_cast<uint64_t>(r->start) * 31 + race * 7 + static_cast<uint64_t>(round),
                                           slice, shared, noise_for(sp));
          evaluations += more.evaluations;
          improvements += more.improvements;
          if (more.best_score < r->result.best_score) r->result = std::move(more);
        }
        // Ties keep the earlier (better-scored) start, so the race does not depend on timing.
        std::stable_sort(field.begin(), field.end(),
                         [](const Racer* a, const Racer* b) { return a->result.best_score < b->result.best_score; });
        field.resize((field.size() + 1) / 2);
        slice *= 2;
      }
    }
    const Racer& won = *std::min_element(racers.begin(), racers.end(), [](const Racer& a, const Racer& b) {
      return a.result.best_score < b.result.best_score;
    });
    results[k] = won.result;
    results[k].evaluations = evaluations;
    results[k].improvements = improvements;
    result_start[k] = won.start;
  };
  std::vector<std::exception_ptr> failures(threads);
  std::vector<std::thread> workers;
  for (int k = 0; k < threads; k++)
    workers.emplace_back([&, k] {
      try {
        run_races(k);
      } catch (...) {
        failures[k] = std::current_exception();
        shared.stop = true;
      }
      finished++;
    });
  double last_progress = -1;
  while (finished.load() < threads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double elapsed = seconds_since(t0);
    if (elapsed > options.time_limit_s * kSearchShare && !shared.stop) {
      shared.stop = true;
      out.stats.stopped_by_time = true;
    }
    const double best = shared.best_fitting_makespan_us.load();
    if (until_time && best > 0 && best <= bound * (1 + 1e-12)) shared.stop = true;
    if (options.progress && elapsed - last_progress >= 0.5) {
      options.progress({elapsed, shared.evaluations.load(), shared.best_fitting_makespan_us.load(), bound});
      last_progress = elapsed;
    }
  }
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : failures)
    if (e) std::rethrow_exception(e);

  // The best search wins; ties go to the lower thread, so the answer does not depend on timing.
  int win = 0;
  for (int k = 1; k < threads; k++)
    if (results[k].best_score < results[win].best_score) win = k;
  const Start& st = starts[result_start[win]];
  for (const SearchResult& r : results) {
    out.stats.evaluations += r.evaluations;
    out.stats.improvements += r.improvements;
  }
  out.stats.start_family = st.name;
  out.stats.start_makespan_us = st.score.makespan_us;

  out.problem = st.built.problem;
  // What the search's plateau walk left behind and the winner does not need (in the time the
  // search left, or as many simulations as the schedule's size allows when it did not bind).
  Tidied tidied = drop_needless(out.problem, results[win].best,
                                std::clamp<int64_t>(static_cast<int64_t>(4e7 / std::max<size_t>(ops, 1)), 100, 5000), after(1),
                                noise_for(out.problem));
  out.schedule = std::move(tidied.schedule);
  out.stats.recomputes_dropped = tidied.recomputes_dropped;
  out.stats.offloads_dropped = tidied.offloads_dropped;
  if (options.exact) run_exact(options, t0, &placement_problems, &placement_bounds, &out);
  bound = overall_bound();
  if (options.any_timing) {
    SimResult nominal = simulate(out.problem, out.schedule);
    OPTPIPE_CHECK(nominal.ok(), "the optimizer's winner must simulate: " + nominal.status.message);
    Gated gated = gate_for_any_timing(out.problem, out.schedule, nominal.timeline, /*prune_until=*/after(1.1));
    out.schedule = std::move(gated.schedule);
    out.stats.waits_added = gated.waits_added;
    out.stats.reload_gates_added = gated.reload_gates_added;
  }

  // Checked and simulated once more, the way everything optpipe reports is.
  Validation v = validate(out.problem, out.schedule,
                          {.check_memory_budget = false, .sim = {.op_times = true, .memory_curve = true}});
  OPTPIPE_CHECK(v.ok(), "the optimizer produced an invalid schedule: " + v.summary());
  out.timeline = std::move(v.sim.timeline);
  for (const DeviceFigures& f : out.timeline.devices)
    out.needed_budget_bytes.push_back(options.any_timing ? f.worst_peak_bytes : f.peak_bytes);
  const bool fits = options.any_timing ? fits_any_timing(out.problem, out.timeline) : fits_budget(out.problem, out.timeline);
  out.budget_lower_bound_bytes = budget_lower_bound(out.problem);
  out.lower_bound_us = bound;
  const double makespan = out.timeline.makespan_us;
  out.gap = makespan > 0 ? std::max(0.0, (makespan - bound) / makespan) : 0;
  out.outcome = !fits ? Outcome::kInfeasible : makespan <= bound * (1 + 1e-12) ? Outcome::kOptimal : Outcome::kFeasible;
  out.stats.wall_s = seconds_since(t0);
  if (options.progress) options.progress({out.stats.wall_s, out.stats.evaluations, fits ? makespan : 0, bound});
  return out;
}

}  // namespace optpipe
