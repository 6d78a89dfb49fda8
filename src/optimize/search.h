// Local search over one placement's schedules (private to the optimizer): moves that reorder
// compute ops, split or fuse backwards, and switch activations between kept, offloaded and
// recomputed; every candidate scored by the simulator.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "optpipe/noise.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/simulate.h"

namespace optpipe {

// Lexicographic: bytes over budget (summed over devices) first, then makespan, then the sum of
// the devices' finishing times — which moves when the makespan does not, and so leads a search
// across the makespan's plateaus.
struct Score {
  double overflow_bytes = 0;  // a double: summed over devices it could pass int64
  double objective_us = 0;    // the makespan or the longest span (Objective)
  double sum_end_us = 0;
  bool operator<(const Score& o) const {
    if (overflow_bytes != o.overflow_bytes) return overflow_bytes < o.overflow_bytes;
    if (objective_us != o.objective_us) return objective_us < o.objective_us;
    return sum_end_us < o.sum_end_us;
  }
  bool operator<=(const Score& o) const { return !(o < *this); }
};

// The nominal score of a schedule already simulated (its timeline's figures).
Score score_of(const Problem& p, const Timeline& t, Objective objective = Objective::kMakespan);

// How candidates are scored: by which objective, and with `noise` (robust_sigma) by its p90 over
// those samples, gated to fit under any timing.
struct Scoring {
  Objective objective = Objective::kMakespan;
  const NoiseSamples* noise = nullptr;
};

// False when the schedule deadlocks (or is otherwise not simulable). With `noise`, a schedule that
// fits scores the p90 of its gated makespan over the samples (its overflow stays the nominal one:
// gating makes a nominal fit a fit under any timing).
bool score_schedule(const Problem& p, const Schedule& s, Score* out, const Scoring& scoring = {});

struct [[nodiscard]] SearchResult {
  Schedule best;
  Score best_score;
  int64_t evaluations = 0;
  int64_t improvements = 0;
};

// Seconds from t0 until now, from now until t, and the time `seconds` after t0: the optimizer's
// limits are in seconds, its clock steady.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
inline double seconds_until(std::chrono::steady_clock::time_point t) { return -seconds_since(t); }
inline std::chrono::steady_clock::time_point seconds_after(std::chrono::steady_clock::time_point t0, double seconds) {
  return t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// What a running search shares with whoever watches it. It stops when `stop` is set or at
// `deadline`, whichever comes first.
struct SearchShared {
  std::atomic<bool> stop{false};
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::atomic<int64_t> evaluations{0};
  std::atomic<double> best_fitting_us{0};  // its objective; 0: nothing that fits yet
};

// Improves `start` for at most max_evaluations simulated candidates, or until shared says stop,
// its moves keeping to `rules`. Deterministic for a given seed when not stopped early.
SearchResult local_search(const Problem& p, const Schedule& start, uint64_t seed, int64_t max_evaluations,
                          SearchShared& shared, const Scoring& scoring = {}, const ScheduleRules& rules = {});

}  // namespace optpipe
