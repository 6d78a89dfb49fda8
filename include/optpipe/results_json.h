// results_json.h — what optpipe reports, as JSON: one builder per result, shared by the
// command line's --json and the Python module, so that one concept has one name everywhere.
#pragma once

#include <nlohmann/json.hpp>

#include "optpipe/families.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/problem.h"
#include "optpipe/simulate.h"

namespace optpipe {

// Makespan, longest span, bubble ratio, fits (nominally and under any timing), and per device:
// busy/idle, first/last op, peak memory (bytes, time, op; worst case over timings), budget,
// offload/reload traffic, recomputes.
nlohmann::json timeline_json(const Problem& p, const Timeline& t);

// The noise evaluation's figures (null where no sample finished).
nlohmann::json noise_json(const NoiseSpec& spec, const NoiseReport& r);

// Devices, microbatches, placement, stages, per-device budgets.
nlohmann::json problem_summary_json(const Problem& p);

// The families: name, placement, chunks_per_device, description.
nlohmann::json families_json();

// The rules the answer kept to: placements, chunks_per_device (0: any), offload, recompute,
// whole_stage_recompute.
nlohmann::json rules_json(const ScheduleRules& rules);

// An optimizer's answer: its timeline's figures (as timeline_json), then outcome, lower bound,
// gap, placement, best_family ({name, makespan_us} of the fastest published family that fits,
// or null), idle_reduction_vs_best_family, needed and lower-bound budgets, timing, robust, and
// the search's stats. Not the problem or schedule themselves.
nlohmann::json optimize_json(const OptimizeResult& r, const OptimizeOptions& options);

}  // namespace optpipe
