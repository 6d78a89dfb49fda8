#include "optpipe/results_json.h"

#include <cmath>

#include "optpipe/schedule.h"

namespace optpipe {

nlohmann::json problem_summary_json(const Problem& p) {
  nlohmann::json budgets = nlohmann::json::array();
  for (const DeviceSpec& d : p.devices) budgets.push_back(d.mem_budget_bytes);
  return {{"num_devices", p.num_devices},
          {"num_microbatches", p.num_microbatches},
          {"placement", placement_name(p.placement)},
          {"chunks_per_device", p.chunks_per_device},
          {"num_stages", p.num_stages()},
          {"mem_budget_bytes", budgets}};
}

nlohmann::json noise_json(const NoiseSpec& spec, const NoiseReport& r) {
  auto number = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"jitter_sigma", spec.jitter_sigma},
          {"profile_sigma", spec.profile_sigma},
          {"samples", r.samples},
          {"seed", spec.seed},
          {"overflowed", r.overflowed},
          {"stuck", r.stuck},
          {"mean_makespan_us", number(r.mean_makespan_us)},
          {"p50_makespan_us", number(r.p50_makespan_us)},
          {"p95_makespan_us", number(r.p95_makespan_us)},
          {"worst_peak_bytes", r.worst_peak_bytes}};
}

nlohmann::json timeline_json(const Problem& p, const Timeline& t) {
  nlohmann::json devices = nlohmann::json::array();
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceFigures& f = t.devices[d];
    devices.push_back({{"device", d},
                       {"busy_us", f.busy_us},
                       {"idle_us", f.idle_us},
                       {"first_start_us", f.first_start_us},
                       {"last_end_us", f.last_end_us},
                       {"peak_bytes", f.peak_bytes},
                       {"peak_time_us", f.peak_time_us},
                       {"peak_op", op_name(f.peak_op)},
                       {"mem_budget_bytes", p.devices[d].mem_budget_bytes},
                       {"fits_budget", f.peak_bytes <= p.devices[d].mem_budget_bytes},
                       {"worst_peak_bytes", f.worst_peak_bytes},
                       {"worst_peak_op", op_name(f.worst_peak_op)},
                       {"fits_any_timing", f.worst_peak_bytes <= p.devices[d].mem_budget_bytes},
                       {"offload_bytes", f.offload_bytes},
                       {"reload_bytes", f.reload_bytes},
                       {"d2h_busy_us", f.d2h_busy_us},
                       {"h2d_busy_us", f.h2d_busy_us},
                       {"recomputes", f.num_recomputes}});
  }
  return {{"makespan_us", t.makespan_us},
          {"max_span_us", t.max_span_us},
          {"bubble_ratio", t.bubble_ratio},
          {"fits_budget", fits_budget(p, t)},
          {"fits_any_timing", fits_any_timing(p, t)},
          {"devices", devices}};
}

nlohmann::json tuning_json(const FamilyRun& run) {
  nlohmann::json j = {{"family", run.family->name}};
  switch (run.tuning) {
    case Tuning::kAsPublished: j["tuning"] = "as published"; break;
    case Tuning::kRecompute: {
      j["tuning"] = "recompute";
      j["recompute_layers"] = j["num_layers"] = nlohmann::json::array();
      for (const StageSpec& g : run.built.problem.stages) {
        j["recompute_layers"].push_back(g.recompute_layers);
        j["num_layers"].push_back(g.num_layers);
      }
      break;
    }
    case Tuning::kOffload:
      j["tuning"] = "offload";
      j["offload_fraction"] = run.offload_fraction;
      break;
    case Tuning::kPartition:
      j["tuning"] = "partition";
      j["partition"] = partition_rule_name(run.built.problem.partition);
      j["layers_per_stage"] = transformer_layers_per_stage(run.built.problem);
      break;
  }
  return j;
}

nlohmann::json family_run_json(const FamilyRun& run) {
  nlohmann::json j = tuning_json(run);
  if (run.status.ok()) {
    j.update(timeline_json(run.built.problem, run.timeline));
    j["placement"] = placement_name(run.built.problem.placement);
    j["chunks_per_device"] = run.built.problem.chunks_per_device;
  } else {
    j["reason"] = run.status.message;
  }
  j["label"] = run.label;
  j["status"] = run.status.ok() ? "ok" : "not applicable";
  return j;
}

nlohmann::json families_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const Family& f : families())
    out.push_back({{"name", f.name},
                   {"placement", placement_name(f.placement)},
                   {"chunks_per_device", f.chunks_per_device},
                   {"description", f.description}});
  return out;
}

nlohmann::json rules_json(const ScheduleRules& rules) {
  nlohmann::json placements = nlohmann::json::array();
  for (Placement p : rules.placements) placements.push_back(placement_name(p));
  return {{"placements", placements},
          {"chunk_counts", rules.chunk_counts},
          {"offload", rules.offload},
          {"recompute", rules.recompute},
          {"whole_stage_recompute", rules.whole_stage_recompute}};
}

nlohmann::json baseline_json(const OptimizeStats::Baseline& b) {
  if (b.label.empty()) return nullptr;
  return {{"name", b.label}, {"makespan_us", b.makespan_us}, {"objective_us", b.objective_us}};
}

nlohmann::json partition_json(const Problem& p) {
  if (!layers_match(p)) return nlohmann::json::object();
  const bool embedding = p.layers.front().kind == LayerKind::kEmbedding,
             head = p.layers.back().kind == LayerKind::kHead;
  return {{"layers_per_stage", transformer_layers_per_stage(p)},
          {"embedding_stage", embedding ? nlohmann::json(0) : nlohmann::json(nullptr)},
          {"head_stage", head ? nlohmann::json(p.num_stages() - 1) : nlohmann::json(nullptr)}};
}

nlohmann::json optimize_json(const OptimizeResult& r, const OptimizeOptions& options) {
  using json = nlohmann::json;
  const OptimizeStats& st = r.stats;
  auto idle_reduction = [&](const OptimizeStats::Baseline& b) {
    return b.idle_us > 0 ? 1 - r.timeline.idle_us / b.idle_us : 0;
  };
  json j = timeline_json(r.problem, r.timeline);
  j["outcome"] = outcome_name(r.outcome);
  j["lower_bound_us"] = r.lower_bound_us;
  j["gap"] = r.gap;
  j["placement_lower_bound_us"] = r.placement_lower_bound_us;
  j["placement_gap"] = r.placement_gap;
  j["cut_lower_bound_us"] = r.cut_lower_bound_us;
  j["cut_gap"] = r.cut_gap;
  j["placement"] = placement_name(r.problem.placement);
  j["chunks_per_device"] = r.problem.chunks_per_device;
  j["objective"] = objective_name(options.objective);
  j["objective_us"] = objective_us(r.timeline, options.objective);
  j["best_family"] = baseline_json(st.best_family);
  j["idle_reduction_vs_best_family"] = idle_reduction(st.best_family);
  j["best_published_family"] = baseline_json(st.best_published_family);
  j["idle_reduction_vs_best_published_family"] = idle_reduction(st.best_published_family);
  j["needed_budget_bytes"] = r.needed_budget_bytes;
  j["budget_lower_bound_bytes"] = r.budget_lower_bound_bytes;
  j["frugal_budget_bytes"] = r.frugal_budget_bytes;
  j["uniform_budget_lower_bound_bytes"] = r.uniform_budget_lower_bound_bytes;
  j["would_help"] = r.would_help;
  j["frugal_schedule"] = r.frugal_label;
  j.update(partition_json(r.problem));
  j["timing"] = options.any_timing ? "any" : "exact";
  j["rules"] = rules_json(options.rules);
  j["robust"] = options.robust_sigma > 0 ? json{{"sigma", options.robust_sigma}, {"samples", options.robust_samples}}
                                         : json(nullptr);
  j["stats"] = {{"wall_s", st.wall_s},
                {"evaluations", st.evaluations},
                {"improvements", st.improvements},
                {"stopped_by_time", st.stopped_by_time},
                {"start_family", st.start_family},
                {"start_objective_us", st.start_objective_us},
                {"placements_searched", st.placements_searched},
                {"partition_moves", st.partition_moves},
                {"exact_solves", st.exact_solves},
                {"lns_improvements", st.lns_improvements},
                {"exact_nodes", st.exact_nodes},
                {"recomputes_dropped", st.recomputes_dropped},
                {"offloads_dropped", st.offloads_dropped},
                {"waits_added", st.waits_added},
                {"reload_gates_added", st.reload_gates_added},
                {"gating_cost_us", st.gating_cost_us},
                {"seed", options.seed},
                {"threads", options.threads}};
  return j;
}

}  // namespace optpipe
