// figures.h — what the simulator says about a schedule, as JSON (for --json, the Python module).
#pragma once

#include <nlohmann/json.hpp>

#include "optpipe/noise.h"
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

}  // namespace optpipe
