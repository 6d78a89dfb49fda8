// The race of local searches: successive halving per thread, the threads watched from here.
#include "optimize/race.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

struct Racer {
  int start;
  SearchResult result;
};

// One thread's share of the starts, raced: every search runs a slice, the better half goes on
// from where it stands with twice the slice, until one is left. A start that looks worse early
// but improves faster is not dropped after one short look.
SearchResult run_races(const RaceSetup& setup, int k, SearchShared& shared, int* won_start) {
  const std::vector<Start>& starts = *setup.starts;
  std::vector<Racer> racers;
  for (int i = k; i < setup.num_searches; i += setup.threads) racers.push_back({i, {}});
  if (racers.empty()) racers.push_back({0, {}});
  for (Racer& r : racers) {
    r.result.best = starts[r.start].built.schedule;
    r.result.best_score = starts[r.start].score;
    if (const NoiseSamples* noise = setup.noise_for(starts[r.start].built.problem))
      OPTPIPE_CHECK(score_schedule(starts[r.start].built.problem, r.result.best, &r.result.best_score,
                                   {setup.objective, noise}),
                    "a start must simulate");
  }
  int rounds = 1;
  while ((size_t{1} << (rounds - 1)) < racers.size()) rounds++;
  int64_t evaluations = 0, improvements = 0;
  const uint64_t seed = setup.seed * 1000003 + static_cast<uint64_t>(k) * 7919;
  // One race spends the budget; without a budget of its own (and with no exact models to leave
  // time for) the search races again with twice the budget, every start going on from where it
  // stood, until the time limit or a proven optimum stops it. A start dropped early gets a longer
  // look in the next race. Then the first race is small, so that several fit in the limit.
  int64_t race_budget = setup.until_time ? std::max<int64_t>(1, setup.budget / 8) : setup.budget;
  for (uint64_t race = 0; race == 0 || (setup.until_time && !shared.stop); race++, race_budget *= 2) {
    std::vector<Racer*> field;
    for (Racer& r : racers) field.push_back(&r);
    // Each round spends about the same share: n searches × slice, then n/2 × 2·slice, ...
    int64_t slice = std::max<int64_t>(1, race_budget / rounds / static_cast<int64_t>(field.size()));
    for (int round = 0; round < rounds && !shared.stop; round++) {
      for (Racer* r : field) {
        const Problem& sp = starts[r->start].built.problem;
        SearchResult more =
            local_search(sp, r->result.best,
                         seed + static_cast<uint64_t>(r->start) * 31 + race * 7 + static_cast<uint64_t>(round), slice,
                         shared, {setup.objective, setup.noise_for(sp)}, setup.rules);
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
  SearchResult out = won.result;
  out.evaluations = evaluations;
  out.improvements = improvements;
  *won_start = won.start;
  return out;
}

}  // namespace

RaceOutcome race_searches(const RaceSetup& setup) {
  const int threads = setup.threads;
  SearchShared shared;
  shared.deadline = seconds_after(setup.t0, setup.stop_after_s);
  std::atomic<int> finished{0};
  std::vector<SearchResult> results(threads);
  std::vector<int> result_start(threads, 0);
  std::vector<std::exception_ptr> failures(threads);
  std::vector<std::thread> workers;
  for (int k = 0; k < threads; k++)
    workers.emplace_back([&, k] {
      try {
        results[k] = run_races(setup, k, shared, &result_start[k]);
      } catch (...) {
        failures[k] = std::current_exception();
        shared.stop = true;
      }
      finished++;
    });
  RaceOutcome out;
  double last_progress = -1;
  while (finished.load() < threads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double elapsed = seconds_since(setup.t0);
    if (elapsed > setup.stop_after_s && !shared.stop) {
      shared.stop = true;
      out.stopped_by_time = true;
    }
    const double best = shared.best_fitting_us.load();
    if (setup.until_time && best > 0 && best <= setup.bound_us * (1 + 1e-12)) shared.stop = true;
    if (setup.progress && elapsed - last_progress >= 0.5) {
      setup.progress({elapsed, shared.evaluations.load(), shared.best_fitting_us.load(), setup.bound_us});
      last_progress = elapsed;
    }
  }
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : failures)
    if (e) std::rethrow_exception(e);

  int win = 0;
  for (int k = 1; k < threads; k++)
    if (results[k].best_score < results[win].best_score) win = k;
  out.best = results[win];
  out.start = result_start[win];
  out.best.evaluations = out.best.improvements = 0;
  for (const SearchResult& r : results) {
    out.best.evaluations += r.evaluations;
    out.best.improvements += r.improvements;
  }
  return out;
}

}  // namespace optpipe
