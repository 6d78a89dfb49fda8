// plan.h — the main job as one library call: the cost model's problem, every family at every
// chunk count it takes, then the optimizer on the time left, and the table `optpipe plan`
// prints, as data. The command line and the Python module (`optpipe.plan`) both use it.
//
//   PlanSpec spec{.mem_budget_bytes = int64_t{36} << 30};
//   Result<PlanReport> r = plan(find_model("llama2-13b").value, "8xa100-40gb", spec, OptimizeOptions{});
//   nlohmann::json j = plan_json(r.value, options);   // what `optpipe plan --json` prints
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/optimize.h"
#include "optpipe/plan_file.h"

namespace optpipe {

// The families for a table beside the optimizer, within the time limit: built until the limit
// (and a quarter second) has passed; the optimizer then gets what is left of it, and these runs
// as its own (it does not build them again). An error status in r->status when the static
// memory cannot fit.
std::vector<FamilyRun> families_then_optimize(const Problem& p, const SimOptions& sim, OptimizeOptions options,
                                              OptimizeResult* r);

// Per run, whether a table shows it: every run of a family that runs at one chunk count; of one
// that takes any (interleaved), the runs at its best count only — the count whose fastest fitting
// run (any tuning) is fastest, else whose fastest run is. The JSON keeps every run.
std::vector<bool> at_best_chunks(const std::vector<FamilyRun>& runs, Objective objective);

// What was planned for: the model (named `model_name`), cluster, layout and batch of `spec`, the
// microbatches and budget of the problem built from them.
PlannedFor planned_for(const ModelSpec& model, const std::string& model_name, const std::string& cluster_name,
                       const PlanSpec& spec, const Problem& built);

struct [[nodiscard]] PlanReport {
  Problem problem;  // what the cost model built: the families' and the optimizer's input
  PlannedFor planned_for;
  std::vector<FamilyRun> runs;  // every family at every chunk count the layers allow
  OptimizeResult result;        // result.status not ok: the rules or the static memory refused
};

// The problem from the model and cluster (the preset names as given; see find_cluster) and the
// plan's settings, then families_then_optimize. InvalidInput for what the cost model refuses.
Result<PlanReport> plan(const ModelSpec& model, const std::string& cluster_name, const PlanSpec& spec,
                        const OptimizeOptions& options, const SimOptions& sim = {});
// The same on a problem already built (a measured profile applied, a partition pinned).
PlanReport plan_problem(const Problem& p, const PlannedFor& planned_for, const OptimizeOptions& options,
                        const SimOptions& sim = {});

// The optimized schedule's whole iteration (iteration_figures, cost_model.h: pipeline, exposed
// data-parallel reduction, optimizer step; tokens/s/GPU, model TFLOP/s/GPU), or nothing when
// nothing fits or the cluster is not a preset's.
std::optional<IterationFigures> plan_iteration(const PlanReport& r);

// The table's rows: every family run (with "in_table": whether the text table shows it, see
// at_best_chunks), then "optimized"; each with the schedule's name, placement, chunks_per_device,
// fits_budget, fits_any_timing, makespan_us, max_span_us, bubble_ratio, peak_bytes,
// speedup_vs_best_family (against the fastest fitting family row, by the objective; 0 where the
// row does not fit), lower_bound_us and gap; a family that does not apply as its status and reason.
nlohmann::json plan_rows_json(const PlanReport& r, Objective objective);

// What `optpipe plan --json` prints: model, cluster, problem, schedules (plan_rows_json),
// outcome, timing, objective, rules, best families, the budget minimums, the partition, the
// search's figures and the iteration (plan_iteration; null when there is none).
nlohmann::json plan_json(const PlanReport& r, const OptimizeOptions& options);

}  // namespace optpipe
