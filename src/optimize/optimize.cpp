// The optimizer's driver: every family as a start, local search from the best ones (one per
// thread), then the winner validated and simulated once more for the report.
#include <algorithm>
#include <chrono>
#include <thread>

#include "optimize/search.h"
#include "optpipe/families.h"
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

struct Start {
  const Family* family;
  FamilySchedule built;
  Score score;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

  // Every family that applies, scored; the best first.
  std::vector<Start> starts;
  for (const Family& f : families()) {
    Result<FamilySchedule> fs = build_family(f, p);
    if (!fs.ok()) continue;
    Score sc;
    OPTPIPE_CHECK(score_schedule(fs.value.problem, fs.value.schedule, &sc), std::string("family ") + f.name + " must simulate");
    starts.push_back({&f, std::move(fs.value), sc});
  }
  OPTPIPE_CHECK(!starts.empty(), "at least 1f1b applies to every problem");
  std::stable_sort(starts.begin(), starts.end(), [](const Start& a, const Start& b) { return a.score < b.score; });

  // The lower bound over every placement a search runs in (thread k starts from start k).
  const int threads = options.threads;
  const int num_searches = std::min<int>(threads, static_cast<int>(starts.size()));
  double bound = 0;
  for (int k = 0; k < num_searches; k++) {
    const Problem& sp = starts[k].built.problem;
    const std::string where = std::string(placement_name(sp.placement)) + " v" + std::to_string(sp.chunks_per_device);
    std::vector<std::string>& seen = out.stats.placements_searched;
    if (std::find(seen.begin(), seen.end(), where) != seen.end()) continue;
    seen.push_back(where);
    const double b = makespan_lower_bound(sp);
    bound = seen.size() == 1 ? b : std::min(bound, b);
  }

  // One search per thread, each from its own start (threads beyond the number of starts use the
  // best start with another seed).
  const size_t ops = starts[0].built.schedule.num_ops();
  const int64_t budget = options.max_evaluations > 0
                             ? options.max_evaluations
                             : std::clamp<int64_t>(static_cast<int64_t>(1e8 / std::max<size_t>(ops, 1)), 2000, 100000);
  SearchShared shared;
  std::atomic<int> finished{0};
  std::vector<SearchResult> results(threads);
  std::vector<std::thread> workers;
  for (int k = 0; k < threads; k++) {
    workers.emplace_back([&, k] {
      const Start& st = starts[k < num_searches ? k : 0];
      results[k] = local_search(st.built.problem, st.built.schedule, options.seed * 1000003 + k, budget, shared);
      finished++;
    });
  }
  double last_progress = -1;
  while (finished.load() < threads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double elapsed = seconds_since(t0);
    if (elapsed > options.time_limit_s && !shared.stop) {
      shared.stop = true;
      out.stats.stopped_by_time = true;
    }
    if (options.progress && elapsed - last_progress >= 0.5) {
      options.progress({elapsed, shared.evaluations.load(), shared.best_fitting_makespan_us.load(), bound});
      last_progress = elapsed;
    }
  }
  for (std::thread& w : workers) w.join();

  // The best search wins; ties go to the lower thread, so the answer does not depend on timing.
  int win = 0;
  for (int k = 1; k < threads; k++)
    if (results[k].best_score < results[win].best_score) win = k;
  const Start& st = starts[win < num_searches ? win : 0];
  for (const SearchResult& r : results) {
    out.stats.evaluations += r.evaluations;
    out.stats.improvements += r.improvements;
  }
  out.stats.start_family = st.family->name;
  out.stats.start_makespan_us = st.score.makespan_us;

  // Checked and simulated once more, the way everything optpipe reports is.
  out.problem = st.built.problem;
  out.schedule = std::move(results[win].best);
  Validation v = validate(out.problem, out.schedule,
                          {.check_memory_budget = false, .sim = {.op_times = true, .memory_curve = true}});
  OPTPIPE_CHECK(v.ok(), "the optimizer produced an invalid schedule: " + v.summary());
  out.timeline = std::move(v.sim.timeline);
  bool fits = true;
  for (int d = 0; d < p.num_devices; d++) {
    out.needed_budget_bytes.push_back(out.timeline.devices[d].peak_bytes);
    fits = fits && out.timeline.devices[d].peak_bytes <= out.problem.devices[d].mem_budget_bytes;
  }
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
