// The exact models (CP on Gecode, MILP on CBC) driven from the optimizer.
#include "optimize/exact_driver.h"

#include <algorithm>

#include "optimize/search.h"
#include "optpipe/cp.h"
#include "optpipe/milp.h"

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

// Beyond this many order binaries CBC rarely closes the gap within seconds (proving 8 devices ×
// 32 microbatches optimal was measured at 45 s); the heuristics carry such problems alone.
constexpr size_t kMaxExactBinaries = 4000;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

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
  const double share = (options.time_limit_s - seconds_since(t0)) / (2 + 2 * open.size());
  if (share < 0.05) return;
  // The models decide recomputes per microbatch: with whole-stage recompute they decide none (a
  // schedule without recomputes keeps to that rule too).
  const bool per_microbatch_recompute = options.rules.recompute && !options.rules.whole_stage_recompute;
  auto consider = [&](const Status& st, Schedule& candidate, const char* how) {
    Score sc;
    if (st.ok() && score_schedule(out->problem, candidate, &sc, scoring) && sc < current) {
      current = sc;
      out->schedule = std::move(candidate);
      out->stats.start_family += how;
    }
  };
  CpSolution cp = solve_cp(
      out->problem,
      {.memory = true, .time_limit_s = share, .recompute = per_microbatch_recompute, .offload = options.rules.offload});
  out->stats.exact_solves++;
  out->stats.exact_nodes += cp.nodes;
  consider(cp.status, cp.schedule, " +cp");
  const MilpOptions budgeted{.memory = true,
                             .time_limit_s = share,
                             .threads = options.threads,
                             .recompute = per_microbatch_recompute,
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
        if ((*problems)[k]->placement == out->problem.placement &&
            (*problems)[k]->chunks_per_device == out->problem.chunks_per_device)
          (*bounds)[k] = std::max((*bounds)[k], sol.bound_us);
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

}  // namespace optpipe
