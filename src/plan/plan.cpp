// The main job: the cost model's problem, the families, the optimizer, and the table as data.
#include "optpipe/plan.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "optpipe/results_json.h"
#include "optpipe/space.h"

namespace optpipe {

std::vector<FamilyRun> families_then_optimize(const Problem& p, const SimOptions& sim, OptimizeOptions options,
                                              OptimizeResult* r) {
  if (Status st = static_memory_status(p, options.rules); !st.ok()) {  // before the families, which cannot fit either
    r->status = st;
    return {};
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(options.time_limit_s);
  auto after = [&](double share) {
    return t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(share * limit);
  };
  const std::vector<PlacementCandidate> space = placement_space(p, options.rules);
  std::vector<FamilyRun> runs = run_families(p, sim, after(1) + std::chrono::milliseconds(250),
                                             interleaved_chunk_counts(space), after(kTuningsShareOfLimit));
  rule_out(options.rules, space, &runs);
  const double spent_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  options.time_limit_s = std::max(0.01, options.time_limit_s - spent_s);
  options.families = &runs;
  *r = optimize(p, options);
  return runs;
}

std::vector<bool> at_best_chunks(const std::vector<FamilyRun>& runs, Objective objective) {
  // Per family: the best (fits, objective) and its count.
  std::map<const Family*, std::pair<std::pair<bool, double>, int>> best;
  for (const FamilyRun& run : runs) {
    if (!run.status.ok() || !run.family->takes_any_chunks()) continue;
    const std::pair<bool, double> key{!run.fits, objective_us(run.timeline, objective)};
    auto [at, fresh] = best.insert({run.family, {key, run.built.problem.chunks_per_device}});
    if (!fresh && key < at->second.first) at->second = {key, run.built.problem.chunks_per_device};
  }
  std::vector<bool> shown;
  for (const FamilyRun& run : runs) {
    const auto at = best.find(run.family);
    // A run that did not apply shows only where none of its family's did.
    shown.push_back(at == best.end() || (run.status.ok() && run.built.problem.chunks_per_device == at->second.second));
  }
  return shown;
}

PlannedFor planned_for(const ModelSpec& model, const std::string& model_name, const std::string& cluster_name,
                       const PlanSpec& spec, const Problem& built) {
  PlannedFor pf{.model = model, .cluster = cluster_name, .spec = spec};
  pf.spec.num_microbatches = built.num_microbatches;
  pf.spec.mem_budget_bytes = built.devices.front().mem_budget_bytes;
  pf.global_batch = int64_t{built.num_microbatches} * spec.microbatch_size * spec.dp;
  pf.model.name = model_name;
  return pf;
}

PlanReport plan_problem(const Problem& p, const PlannedFor& planned_for, const OptimizeOptions& options,
                        const SimOptions& sim) {
  PlanReport r{.problem = p, .planned_for = planned_for};
  r.runs = families_then_optimize(p, sim, options, &r.result);
  return r;
}

Result<PlanReport> plan(const ModelSpec& model, const std::string& cluster_name, const PlanSpec& spec,
                        const OptimizeOptions& options, const SimOptions& sim) {
  using R = Result<PlanReport>;
  Result<ClusterSpec> cluster = find_cluster(cluster_name);
  if (!cluster.ok()) return R::Error(cluster.status);
  Result<Problem> p = build_problem(model, cluster.value, spec);
  if (!p.ok()) return R::Error(p.status);
  return R::Of(plan_problem(p.value, planned_for(model, model.name, cluster_name, spec, p.value), options, sim));
}

std::optional<IterationFigures> plan_iteration(const PlanReport& r) {
  const PlannedFor& pf = r.planned_for;
  Result<ClusterSpec> cluster = find_cluster(pf.cluster);
  if (r.result.outcome == Outcome::kInfeasible || !cluster.ok() || pf.model.num_layers < 1) return std::nullopt;
  return iteration_figures(pf.model, cluster.value, pf.spec, pf.global_batch, r.result.timeline.makespan_us);
}

nlohmann::json plan_rows_json(const PlanReport& r, Objective objective) {
  const FamilyRun* best = fastest_fitting(r.runs, objective);
  const double best_us = best ? objective_us(best->timeline, objective) : 0;
  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](const std::string& name, const Problem& fp, const Timeline& t, bool fits, double bound,
                 nlohmann::json j) {
    const double value = objective_us(t, objective);
    const double gap = value > 0 ? std::max(0.0, (value - bound) / value) : 0;  // 0 where they meet, not -1e-16
    OPTPIPE_CHECK(gap > -1e-9, name + ": its lower bound " + std::to_string(bound) + " µs is above its " +
                                   objective_name(objective));
    j.update({{"schedule", name},
              {"placement", placement_name(fp.placement)},
              {"chunks_per_device", fp.chunks_per_device},
              {"fits_budget", fits},
              {"fits_any_timing", fits_any_timing(fp, t)},
              {"makespan_us", t.makespan_us},
              {"max_span_us", t.max_span_us},
              {"bubble_ratio", t.bubble_ratio},
              {"peak_bytes", max_peak(t)},
              {"speedup_vs_best_family", best_us > 0 && fits ? best_us / value : 0},
              {"lower_bound_us", bound},
              {"gap", gap}});
    rows.push_back(std::move(j));
  };
  const std::vector<bool> shown = at_best_chunks(r.runs, objective);
  for (size_t k = 0; k < r.runs.size(); k++) {
    const FamilyRun& o = r.runs[k];
    if (o.status.ok()) {
      nlohmann::json j = tuning_json(o);
      j["in_table"] = static_cast<bool>(shown[k]);
      row(o.label, o.built.problem, o.timeline, o.fits, lower_bound_for(o.built.problem, o.fits, objective), j);
    } else {
      rows.push_back({{"schedule", o.label},
                      {"status", "not applicable"},
                      {"reason", o.status.message},
                      {"in_table", static_cast<bool>(shown[k])}});
    }
  }
  const OptimizeResult& opt = r.result;
  const bool fits = opt.outcome != Outcome::kInfeasible;
  row("optimized", opt.problem, opt.timeline, fits,
      fits ? opt.lower_bound_us : lower_bound_for(opt.problem, false, objective), {{"in_table", true}});
  return rows;
}

namespace {

nlohmann::json iteration_json(const std::optional<IterationFigures>& f) {
  if (!f) return nullptr;
  return {{"pipeline_us", f->pipeline_us},
          {"dp_exposed_us", f->dp_exposed_us},
          {"optimizer_us", f->optimizer_us},
          {"iteration_us", f->iteration_us},
          {"tokens_per_s_per_gpu", f->tokens_per_s_per_gpu},
          {"model_tflops_per_gpu", f->model_tflops_per_gpu},
          {"mfu", f->mfu}};
}

}  // namespace

nlohmann::json plan_json(const PlanReport& r, const OptimizeOptions& options) {
  const OptimizeResult& opt = r.result;
  return {{"model", r.planned_for.model.name},
          {"cluster", r.planned_for.cluster},
          {"problem", problem_summary_json(r.problem)},
          {"schedules", plan_rows_json(r, options.objective)},
          {"outcome", outcome_name(opt.outcome)},
          {"timing", options.any_timing ? "any" : "exact"},
          {"objective", objective_name(options.objective)},
          {"rules", rules_json(options.rules)},
          {"best_family", baseline_json(baseline_of(fastest_fitting(r.runs, options.objective), options.objective))},
          {"best_published_family",
           baseline_json(
               baseline_of(fastest_fitting(r.runs, options.objective, /*as_published_only=*/true), options.objective))},
          {"needed_budget_bytes", opt.needed_budget_bytes},
          {"budget_lower_bound_bytes", opt.budget_lower_bound_bytes},
          {"frugal_budget_bytes", opt.frugal_budget_bytes},
          {"uniform_budget_lower_bound_bytes", opt.uniform_budget_lower_bound_bytes},
          {"frugal_schedule", opt.frugal_label},
          {"partition", partition_json(opt.problem)},
          {"search",
           {{"wall_s", opt.stats.wall_s},
            {"evaluations", opt.stats.evaluations},
            {"stopped_by_time", opt.stats.stopped_by_time}}},
          {"iteration", iteration_json(plan_iteration(r))}};
}

}  // namespace optpipe
