#include "optimize/search.h"

#include <algorithm>

#include "optimize/moves.h"
#include "optpipe/any_timing.h"
#include "optpipe/noise.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

Score score_of(const Problem& p, const Timeline& t, Objective objective) {
  Score out;
  for (int d = 0; d < p.num_devices; d++) {
    out.overflow_bytes +=
        static_cast<double>(std::max<int64_t>(0, t.devices[d].peak_bytes - p.devices[d].mem_budget_bytes));
    out.sum_end_us += t.devices[d].last_end_us;
  }
  out.objective_us = objective_us(t, objective);
  return out;
}

bool score_schedule(const Problem& p, const Schedule& s, Score* out, const Scoring& scoring) {
  const NoiseSamples* noise = scoring.noise;
  // Nominal memory: gate_for_any_timing() makes every schedule that fits nominally fit under any
  // timing at no cost, so the two feasibilities are one.
  SimResult r = simulate(p, s, {.op_times = noise != nullptr, .any_timing = false});
  if (!r.ok()) return false;
  *out = score_of(p, r.timeline, scoring.objective);
  if (noise && out->overflow_bytes == 0) {
    const Schedule gated = gate_for_any_timing(p, s, r.timeline).schedule;
    std::vector<double> makespans;
    for (const std::vector<double>& factors : *noise) {
      SimResult n = simulate(p, gated, {.op_times = false, .any_timing = false, .duration_factors = &factors});
      if (!n.ok()) return false;
      makespans.push_back(objective_us(n.timeline, scoring.objective));
    }
    out->objective_us = quantile(makespans, 0.9);
  }
  return true;
}

namespace {

void publish_fitting(SearchShared& shared, const Score& s) {
  if (s.overflow_bytes > 0) return;
  double seen = shared.best_fitting_us.load();
  while ((seen == 0 || s.objective_us < seen) && !shared.best_fitting_us.compare_exchange_weak(seen, s.objective_us)) {
  }
}

}  // namespace

SearchResult local_search(const Problem& p, const Schedule& start, uint64_t seed, int64_t max_evaluations,
                          SearchShared& shared, const Scoring& scoring, const ScheduleRules& rules) {
  std::mt19937_64 rng(seed);
  Mover mover(p, rules, rng);
  SearchResult out;
  out.best = start;
  OPTPIPE_CHECK(score_schedule(p, start, &out.best_score, scoring), "the start of a search must simulate");
  publish_fitting(shared, out.best_score);
  Schedule cur = start;
  Score cur_score = out.best_score;
  // Late acceptance: a candidate may replace the current one if it is no worse than the
  // current one or than the current one of `kHistory` steps ago; this walks plateaus and
  // climbs out of shallow dips without a temperature to tune.
  constexpr int kHistory = 64;
  std::vector<Score> history(kHistory, cur_score);
  int64_t since_best = 0;
  Schedule cand;  // copied into, not built afresh: its lists keep their capacity from step to step
  for (int64_t step = 0; step < max_evaluations; step++) {
    // Every step: one of a large schedule's candidates costs milliseconds.
    if (shared.stop.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() >= shared.deadline) break;
    cand = cur;
    if (!mover.random_move(cand)) continue;
    Score sc;
    out.evaluations++;
    shared.evaluations.fetch_add(1, std::memory_order_relaxed);
    if (!score_schedule(p, cand, &sc, scoring)) continue;
    Score& old = history[step % kHistory];
    if (sc <= cur_score || sc <= old) {
      std::swap(cur, cand);
      cur_score = sc;
    }
    if (cur_score < old) old = cur_score;
    if (cur_score < out.best_score) {
      out.best = cur;
      out.best_score = cur_score;
      out.improvements++;
      since_best = 0;
      publish_fitting(shared, cur_score);
    } else if (++since_best > 20000) {
      cur = out.best;  // wandered long enough: back to the best
      cur_score = out.best_score;
      since_best = 0;
    }
  }
  return out;
}

}  // namespace optpipe
