// The exact models driven from the optimizer: CP-SAT where its library is there, else the CP
// model on Gecode and the MILP on CBC.
#include "optimize/exact_driver.h"

#include <algorithm>
#include <random>

#include "optimize/search.h"
#include "optpipe/cp.h"
#include "optpipe/cp_sat.h"
#include "optpipe/milp.h"

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

// Beyond this many order binaries CBC rarely closes the gap within seconds (proving 8 devices ×
// 32 microbatches optimal was measured at 45 s); the heuristics carry such problems alone.
constexpr size_t kMaxExactBinaries = 4000;

// The models decide recomputes per microbatch: with whole-stage recompute they decide none (a
// schedule without recomputes keeps to that rule too).
bool per_microbatch_recompute(const ScheduleRules& rules) { return rules.recompute && !rules.whole_stage_recompute; }

// CP-SAT with the budget and the rules' decisions: in the winner's placement (hinted with the
// winner) first, with half the time left, then in each other open placement. A faster solution
// that fits replaces the winner; a bound that holds (cp_sat.h) for a model that decides what the
// rules allow raises its placement's bound.
void run_cp_sat(const OptimizeOptions& options, Clock::time_point t0, const std::vector<const Problem*>& problems,
                const std::vector<size_t>& open, std::vector<double>* bounds, OptimizeResult* out) {
  const Scoring scoring{options.objective, nullptr};
  Score current;
  OPTPIPE_CHECK(score_schedule(out->problem, out->schedule, &current, scoring), "the winner must simulate");
  const bool recompute = per_microbatch_recompute(options.rules);
  // The model decides what the rules allow: then its bound holds for every schedule they allow.
  const bool covers_rules = recompute == options.rules.recompute;
  std::vector<size_t> order;  // the winner's placement first
  for (size_t k : open)
    if (same_placement(*problems[k], out->problem))
      order.insert(order.begin(), k);
    else
      order.push_back(k);
  for (size_t n = 0; n < order.size(); n++) {
    const size_t k = order[n];
    const bool winners = same_placement(*problems[k], out->problem);
    // A margin for gating and checking the answer; the winner's placement takes half of the rest
    // when others are open.
    const double left = 0.95 * options.time_limit_s - seconds_since(t0);
    const double limit = winners && order.size() > 1 ? left / 2 : left / static_cast<double>(order.size() - n);
    if (limit < 0.05) return;
    const Problem& pk = winners ? out->problem : *problems[k];
    CpSatSolution sol = solve_cp_sat(pk, {.recompute = recompute,
                                          .offload = options.rules.offload,
                                          .time_limit_s = limit,
                                          .workers = std::max(2, options.threads),
                                          .seed = options.seed,
                                          .hint = winners ? &out->schedule : nullptr,
                                          .makespan_at_least_us = (*bounds)[k]});
    out->stats.exact_solves++;
    out->stats.exact_nodes += sol.branches;
    Score sc;
    if (winners && sol.status.ok() && score_schedule(out->problem, sol.schedule, &sc, scoring) && sc < current) {
      current = sc;
      out->schedule = std::move(sol.schedule);
      out->stats.start_family += " +cp-sat";
    }
    if (sol.status.code == StatusCode::kInfeasible || !covers_rules || !sol.bound_holds ||
        options.objective != Objective::kMakespan)
      continue;
    (*bounds)[k] = std::max((*bounds)[k], sol.bound_us);
  }
}

}  // namespace

bool exact_uses_cp_sat(const Problem& p, const OptimizeOptions& options) {
  return cp_sat_available().ok() &&
         cp_sat_model_fits(p, {.recompute = per_microbatch_recompute(options.rules), .offload = options.rules.offload});
}

// The exact models on small problems, in the time left. To improve the winner in its placement:
// the CP model and the MILP with the budget, both deciding offloads and recomputes (the MILP
// warm-started from the winner when it has no offloads and each R sits just before its B); a
// faster solution that fits replaces it. To prove bounds in every placement searched whose simple bound
// is below the winner: the CP model without the budget, then, if it did not finish, the MILP's
// relaxation — both hold for every schedule of the placement, offloads and recomputes included.
void run_exact(const OptimizeOptions& options, Clock::time_point t0, const std::vector<const Problem*>* problems,
               std::vector<double>* bounds, OptimizeResult* out) {
  const Scoring scoring{options.objective, nullptr};
  Score current;
  OPTPIPE_CHECK(score_schedule(out->problem, out->schedule, &current, scoring), "the winner must simulate");
  std::vector<size_t> open;
  for (size_t k = 0; k < problems->size(); k++)
    if ((*bounds)[k] < current.objective_us * (1 - 1e-12)) open.push_back(k);
  if (open.empty()) return;  // already proven optimal
  if (exact_uses_cp_sat(out->problem, options)) {
    out->stats.exact_models = "CP-SAT";
    return run_cp_sat(options, t0, *problems, open, bounds, out);
  }
  out->stats.exact_models = "CP on Gecode, MILP on CBC";
  const double share = (options.time_limit_s - seconds_since(t0)) / (2 + 2 * open.size());
  if (share < 0.05) return;
  const bool recompute = per_microbatch_recompute(options.rules);
  auto consider = [&](const Status& st, Schedule& candidate, const char* how) {
    Score sc;
    if (st.ok() && score_schedule(out->problem, candidate, &sc, scoring) && sc < current) {
      current = sc;
      out->schedule = std::move(candidate);
      out->stats.start_family += how;
    }
  };
  CpSolution cp = solve_cp(
      out->problem, {.memory = true, .time_limit_s = share, .recompute = recompute, .offload = options.rules.offload});
  out->stats.exact_solves++;
  out->stats.exact_nodes += cp.nodes;
  consider(cp.status, cp.schedule, " +cp");
  const MilpOptions budgeted{.memory = true,
                             .time_limit_s = share,
                             .threads = options.threads,
                             .recompute = recompute,
                             .offload = options.rules.offload};
  // Sized from the problem before anything is built: a model can run to millions of binaries.
  Result<MilpModel> model = milp_min_binaries(out->problem) <= kMaxExactBinaries
                                ? build_milp(out->problem, budgeted)
                                : Result<MilpModel>::Error(Status::Invalid("too large for the MILP"));
  if (model.ok() && model.value.num_binaries() <= kMaxExactBinaries) {
    MilpSolution sol = solve_milp(out->problem, model.value, budgeted, &out->schedule);
    out->stats.exact_solves++;
    out->stats.exact_nodes += sol.nodes;
    consider(sol.status, sol.schedule, " +milp");
    // Without offloads and recomputes the MILP with the budget leaves out no schedule that fits
    // (exact memory rows; a schedule that fits under any timing fits nominally), so its bound
    // holds for the winner's placement. (With them it does not: R only just before B, reload
    // rows padded by the largest workspace.)
    if (sol.status.ok() && !options.rules.offload && !options.rules.recompute &&
        options.objective == Objective::kMakespan)
      for (size_t k = 0; k < problems->size(); k++)
        if (same_placement(*(*problems)[k], out->problem)) (*bounds)[k] = std::max((*bounds)[k], sol.bound_us);
  }
  // The models' bounds are on the makespan, which does not bound a span.
  if (options.objective == Objective::kSpan) return;
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
    MilpSolution sol =
        solve_milp(pk, m.value, {.memory = false, .time_limit_s = share, .threads = options.threads}, nullptr);
    out->stats.exact_solves++;
    out->stats.exact_nodes += sol.nodes;
    if (sol.bound_us > (*bounds)[k]) (*bounds)[k] = sol.bound_us;
  }
}

bool lns_applies(const Problem& p, const OptimizeOptions& options) {
  // Where CP-SAT pays for the search time it takes. Measured: D = 8 × M = 16 under a tight budget,
  // 10 s, 890 → 770 ms (the optimum); llama2-13b on 8 GPUs × 32 microbatches (the main job),
  // 0.5% slower on 3 of 3 seeds. Each neighbourhood builds and presolves the whole model.
  constexpr int kMaxLnsStageMicrobatches = 128;
  return options.objective == Objective::kMakespan && options.robust_sigma == 0 &&
         p.num_devices * p.num_microbatches <= kMaxLnsStageMicrobatches && exact_uses_cp_sat(p, options);
}

double run_lns(const OptimizeOptions& options, const Problem& p, double bound_us, Clock::time_point deadline,
               SearchResult* searched, OptimizeStats* stats) {
  const Scoring scoring{options.objective, nullptr};
  const int D = p.num_devices, M = p.num_microbatches, S = p.num_stages();
  const bool recompute = per_microbatch_recompute(options.rules);
  std::mt19937_64 rng(options.seed ^ 0x4c4e53);
  const bool covers_rules = recompute == options.rules.recompute;
  double proven_us = 0;
  std::vector<bool> keep(num_op_ids(p));
  // What a solve costs beyond the time it is given (building and loading the model), the most
  // seen so far: kept out of the next one's limit, so that the rounds end by the deadline.
  double overhead_s = 0;
  const int64_t improvements_before = stats->lns_improvements;
  for (int round = 0; round < 100000; round++) {
    // Where the whole model improved nothing, the windows did not either (the suite's instances
    // with D·M ≤ 128, bench/results/2026-12-04-lns-give-back.txt): the local search takes the
    // time back.
    if (round == 2 && stats->lns_improvements == improvements_before) break;
    const double left = seconds_until(deadline) - overhead_s;
    if (left < 0.05 || searched->best_score.objective_us <= std::max(bound_us, proven_us) * (1 + 1e-12)) break;
    const int devices = std::min(D, 2 + static_cast<int>(rng() % 2));
    const int microbatches = std::min(M, 4 + static_cast<int>(rng() % 5));
    const int d0 = static_cast<int>(rng() % (D - devices + 1)), m0 = static_cast<int>(rng() % (M - microbatches + 1));
    std::fill(keep.begin(), keep.end(), true);
    for (int s = 0; s < S; s++) {
      const int d = p.device_of(s);
      if (d < d0 || d >= d0 + devices) continue;
      for (int i = m0; i < m0 + microbatches; i++)
        for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW}) keep[op_id(p, Op{k, s, i})] = false;
    }
    // The first two neighbourhoods are the whole schedule, each for half the time left: on small
    // problems CP-SAT often gets furthest alone. First hinted with the winner (how it improves a
    // winner near the optimum: u-d8-m8-tight-comm 1.145 → 1.107 s), then without a hint (a hint
    // far off the optimum holds the search there: D = 8, M = 16 under a tight budget, the
    // optimum proven in 1 s unhinted, not in 3 s hinted with a schedule 17% slower). Tried: the
    // two at once with one worker each (proved D = 8, M = 16 on 3 of 3 seeds, never improved
    // u-d8-m8-tight-comm). The first true neighbourhood gets half of what is left too: until one
    // has been timed, its overhead is not known.
    const bool whole = round <= 1;
    const double limit_s = round <= 2 ? left / 2 : std::min(1.0, left);
    const Clock::time_point solve_start = Clock::now();
    CpSatSolution sol = solve_cp_sat(p, {.recompute = recompute,
                                         .offload = options.rules.offload,
                                         .time_limit_s = limit_s,
                                         .workers = whole ? std::max(2, options.threads) : 1,
                                         .seed = rng(),
                                         .hint = round == 1 ? nullptr : &searched->best,
                                         .keep = whole ? nullptr : &keep,
                                         .makespan_at_least_us = bound_us});
    stats->exact_solves++;
    overhead_s = std::max(overhead_s, seconds_since(solve_start) - limit_s);
    stats->exact_models = "CP-SAT";
    if (whole && covers_rules && sol.bound_holds && sol.status.code != StatusCode::kInfeasible)
      proven_us = std::max(proven_us, sol.bound_us);
    Score sc;
    if (sol.status.ok() && score_schedule(p, sol.schedule, &sc, scoring) && sc < searched->best_score) {
      searched->best = std::move(sol.schedule);
      searched->best_score = sc;
      stats->lns_improvements++;
    }
  }
  return proven_us;
}

}  // namespace optpipe
