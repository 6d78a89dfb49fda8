// The optimizer's race (private to it): threads of local searches from the best starts, raced by
// successive halving, watched for the time limit and a proven optimum.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "optimize/search.h"
#include "optimize/starts.h"
#include "optpipe/optimize.h"

namespace optpipe {

struct RaceSetup {
  const std::vector<Start>* starts = nullptr;
  int num_searches = 1;  // the first this many starts are raced
  int threads = 1;
  uint64_t seed = 0;
  int64_t budget = 0;       // candidates per race
  bool until_time = false;  // race again with twice the budget until stopped
  std::chrono::steady_clock::time_point t0;
  double stop_after_s = 0;  // since t0
  double bound_us = 0;      // with until_time: a fitting schedule this fast stops the race
  // The samples a start's candidates are scored on (OptimizeOptions::robust_sigma), or null.
  std::function<const NoiseSamples*(const Problem&)> noise_for;
  std::function<void(const Progress&)> progress;
  ScheduleRules rules;  // every search's moves keep to them
  Objective objective = Objective::kMakespan;
};

struct [[nodiscard]] RaceOutcome {
  SearchResult best;  // evaluations and improvements: summed over every search
  int start = 0;      // the start it came from
  bool stopped_by_time = false;
};

// Thread k takes starts k, k+T, ... The best search wins; ties go to the lower thread, so the
// answer does not depend on timing. An exception in a thread (a broken invariant, memory) stops
// the others and is rethrown once every thread has joined: an internal error with its message,
// never a silent terminate.
RaceOutcome race_searches(const RaceSetup& setup);

}  // namespace optpipe
