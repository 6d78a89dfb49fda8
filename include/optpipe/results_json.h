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

// How a run is tuned: {"family", "tuning": "as published" | "recompute" | "offload"}, with the
// per-stage "recompute_layers" and "num_layers" or the "offload_fraction".
nlohmann::json tuning_json(const FamilyRun& run);

// One row of a comparison: tuning_json, "label", "status" ("ok" | "not applicable", with its
// "reason"), and for a run that applies its timeline's figures, placement and chunks_per_device.
nlohmann::json family_run_json(const FamilyRun& run);

// The families: name, placement, chunks_per_device, description.
nlohmann::json families_json();

// The rules the answer kept to: placements, chunks_per_device (0: any), offload, recompute,
// whole_stage_recompute.
nlohmann::json rules_json(const ScheduleRules& rules);

// {"name" (the run's label), "makespan_us", "objective_us"}, or null for an empty baseline.
nlohmann::json baseline_json(const OptimizeStats::Baseline& b);

// The partition of a problem with its layers: {"layers_per_stage": transformer layers per stage in
// stage order, "embedding_stage": 0, "head_stage": S − 1 (null where the model has none)}; an
// empty object without layers.
nlohmann::json partition_json(const Problem& p);

// An optimizer's answer: its timeline's figures (as timeline_json), then outcome, lower bound,
// gap, placement, best_family ({name, makespan_us, objective_us} of the fastest family that fits,
// as published or tuned, or null), best_published_family (as published only), the idle-time cut
// against each, needed and lower-bound budgets, timing, robust, and
// the search's stats. Not the problem or schedule themselves.
nlohmann::json optimize_json(const OptimizeResult& r, const OptimizeOptions& options);

}  // namespace optpipe
