// The benchmark suite's instances: a suite file's entry turned into a problem with its budget.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe {

// A synthetic instance: see the suite file's comment for what each word means.
Result<Problem> synthetic(const nlohmann::json& spec);
// An instance from the cost model's presets ("model", "cluster", optional "microbatches").
Result<Problem> from_preset(const nlohmann::json& spec);
// Per device: the peak (static + activations + workspace) of that family's schedule on p.
std::vector<int64_t> family_peak_bytes(const Problem& p, const char* family);
// Budgets relative to what 1F1B (or ZB-H2) keeps alive: "tight" (half 1F1B's), "1f1b", "rich"
// (ZB-H2's), or "hbm" (the problem's own).
Status set_budget(const std::string& kind, Problem* p);

}  // namespace optpipe
