// optpipe plan, the main job: model + cluster + budget → every family and the optimizer in one
// table, the best schedule written.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.h"
#include "inputs.h"
#include "optpipe/cost_model.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/layouts.h"
#include "optpipe/results_json.h"
#include "optpipe/units.h"
#include "tables.h"

namespace optpipe {

namespace {

struct PlanArgs {
  std::string model = "llama2-13b";
  std::string cluster = "8xa100-40gb";
  std::string budget;  // empty: 90% of HBM
  std::string profile_path;
  std::string report_path;
  std::string out_path = "optpipe_schedule.json";
  std::string problem_out_path;
  int microbatches = 0;
  int microbatch_size = 1;
  int gpus_per_host_link = 0;       // 0: the cluster preset's
  bool no_flash_attention = false;  // keep the attention scores (no selective recompute)
  int tp = 1, dp = 1;
  bool no_sequence_parallel = false, no_distributed_optimizer = false;
  int64_t global_batch = 0;  // sequences; 0: microbatches × microbatch size × dp
  bool search = false;       // rank the cluster's layouts instead
  OptimizerArgs optimizer;
  bool as_json = false;
};

// The model, cluster and plan the options name.
struct PlanInputs {
  ModelSpec model;
  ClusterSpec cluster;
  PlanSpec plan;
};

Result<PlanInputs> plan_inputs(const PlanArgs& a) {
  using R = Result<PlanInputs>;
  PlanInputs in;
  Result<ModelSpec> model = find_model(a.model);
  if (!model.ok()) return R::Error(model.status);
  in.model = model.value;
  in.model.flash_attention = !a.no_flash_attention;
  Result<ClusterSpec> cluster = find_cluster(a.cluster);
  if (!cluster.ok()) return R::Error(cluster.status);
  in.cluster = cluster.value;
  if (a.gpus_per_host_link > 0) in.cluster.gpus_per_host_link = a.gpus_per_host_link;
  PlanSpec& plan = in.plan;
  plan.num_microbatches = a.microbatches;
  plan.microbatch_size = a.microbatch_size;

  plan.tp = a.tp;
  plan.dp = a.dp;
  plan.sequence_parallel = !a.no_sequence_parallel;
  plan.distributed_optimizer = !a.no_distributed_optimizer;
  if (a.global_batch > 0 && !a.search) {
    if (a.microbatches > 0) return R::Error(Status::Invalid("give --global-batch or --microbatches, not both"));
    const int64_t per_rank = int64_t{a.dp} * a.microbatch_size;
    if (a.global_batch % per_rank != 0)
      return R::Error(Status::Invalid("--global-batch " + std::to_string(a.global_batch) +
                                      " is not a multiple of dp × microbatch size = " + std::to_string(per_rank)));
    plan.num_microbatches = static_cast<int>(std::min<int64_t>(a.global_batch / per_rank, 100000));
  }
  if (!a.budget.empty() && (!parse_bytes(a.budget, &plan.mem_budget_bytes) || plan.mem_budget_bytes <= 0))
    return R::Error(Status::Invalid("--budget: expected a positive size such as 60GiB, got \"" + a.budget + "\""));
  return R::Of(std::move(in));
}

// The problem the cost model builds from the presets and options (and a measured profile), and
// what it was planned for.
Result<Problem> plan_problem(const PlanArgs& a, PlannedFor* planned_for) {
  using R = Result<Problem>;
  Result<PlanInputs> in = plan_inputs(a);
  if (!in.ok()) return R::Error(in.status);
  const PlanSpec& plan = in.value.plan;
  Result<Problem> problem = build_problem(in.value.model, in.value.cluster, plan);
  if (problem.ok()) {
    *planned_for = {.model = in.value.model,
                    .cluster = a.cluster,
                    .tp = plan.tp,
                    .dp = plan.dp,
                    .sequence_parallel = plan.sequence_parallel,
                    .distributed_optimizer = plan.distributed_optimizer,
                    .microbatch_size = plan.microbatch_size,
                    .num_microbatches = problem.value.num_microbatches,
                    .global_batch = int64_t{problem.value.num_microbatches} * plan.microbatch_size * plan.dp,
                    .mem_budget_bytes = problem.value.devices.front().mem_budget_bytes};
    planned_for->model.name = a.model;
  }
  if (!problem.ok() || a.profile_path.empty()) return problem;
  Result<std::string> text = read_text_file(a.profile_path);
  if (!text.ok()) return R::Error(text.status);
  if (Status st = apply_profile(text.value, &problem.value); !st.ok())
    return R::Error(Status::Invalid(a.profile_path + ": " + st.message));
  return problem;
}

// The table: every family and the optimized schedule, with speed-ups against the fastest family
// that fits, all by the objective (the makespan, or the longest span); as text rows and as JSON.
struct PlanTable {
  explicit PlanTable(Objective o) : objective(o) {
    rows = {{"schedule", "fits", objective_name(o), "idle", "peak memory", "speed-up", "lower bound", "gap"}};
  }
  Objective objective;
  std::vector<std::vector<std::string>> rows;
  nlohmann::json json = nlohmann::json::array();
  double best_us = 0;
  int hidden = 0;  // runs of the JSON the text table leaves out (the interleaved families at other counts)

  // in_text: also a row of the text table (else of the JSON only).
  void add(const std::string& name, const Problem& fp, const Timeline& t, bool row_fits, double bound,
           nlohmann::json row_json = nlohmann::json::object(), bool in_text = true) {
    const double value = objective_us(t, objective);
    const double gap = value > 0 ? (value - bound) / value : 0;
    OPTPIPE_CHECK(gap > -1e-9, name + ": its lower bound " + std::to_string(bound) + " µs is above its " +
                                   objective_name(objective));
    const double speedup = best_us > 0 && row_fits ? best_us / value : 0;
    const bool any = fits_any_timing(fp, t);
    if (in_text)
      rows.push_back({name, fits_cell(any, row_fits), format_us(value), fmt::format("{:.1f}%", 100 * t.bubble_ratio),
                      format_bytes(max_peak(t)), speedup > 0 ? fmt::format("{:.3f}x", speedup) : "-", format_us(bound),
                      fmt::format("{:.1f}%", 100 * gap)});
    row_json.update({{"schedule", name},
                     {"placement", placement_name(fp.placement)},
                     {"chunks_per_device", fp.chunks_per_device},
                     {"fits_budget", row_fits},
                     {"fits_any_timing", any},
                     {"makespan_us", t.makespan_us},
                     {"max_span_us", t.max_span_us},
                     {"bubble_ratio", t.bubble_ratio},
                     {"peak_bytes", max_peak(t)},
                     {"speedup_vs_best_family", speedup},
                     {"lower_bound_us", bound},
                     {"gap", gap}});
    json.push_back(std::move(row_json));
  }
  void add_not_applicable(const FamilyRun& o, bool in_text) {
    if (in_text) rows.push_back({o.label, "n/a", "-", "-", "-", "-", "-", o.status.message});
    json.push_back({{"schedule", o.label}, {"status", "not applicable"}, {"reason", o.status.message}});
  }
};

Status write_plan_files(const PlanArgs& a, const Problem& p, const PlannedFor& planned_for, const OptimizeResult& r,
                        const std::vector<FamilyRun>& runs) {
  if (r.outcome != Outcome::kInfeasible && !a.out_path.empty())
    if (Status st = write_text_file(a.out_path, plan_file_text(r.problem, r.schedule, planned_for)); !st.ok())
      return st;
  if (!a.problem_out_path.empty())
    if (Status st = write_text_file(a.problem_out_path, problem_to_json(p)); !st.ok()) return st;
  if (a.report_path.empty()) return Status::Ok();
  const std::string title = "optpipe plan: " + a.model + " on " + a.cluster;
  return write_text_file(a.report_path,
                         html_report(title, problem_summary(p), report_rows(runs, r), report_charts(r, runs, {})));
}

void print_plan(const PlanArgs& a, const Problem& p, const PlannedFor& planned_for, const OptimizeOptions& options,
                const OptimizeResult& r, const FamilyRun* best, const FamilyRun* best_published,
                const PlanTable& table) {
  const std::string what = a.model + " on " + a.cluster + ", " + std::to_string(p.num_microbatches) +
                           " microbatches of " + std::to_string(a.microbatch_size) + " × " +
                           std::to_string(planned_for.model.seq_len) + " tokens";
  const std::string rules = options.rules.any() ? "rules: " + options.rules.describe() + "\n" : "";
  std::printf("%s\nproblem: %s\n%s\n%s\n", what.c_str(), problem_summary(p).c_str(), rules.c_str(),
              aligned_table(table.rows).c_str());
  if (table.hidden > 0)
    std::printf(
        "interleaved families: each at its fastest chunk count; %d more run(s), at every count the layers "
        "allow, in --json and the speed-up\n",
        table.hidden);
  if (r.outcome != Outcome::kInfeasible) {
    const double value = objective_us(r.timeline, options.objective);
    std::string vs = best ? fmt::format("{:.3f}x the fastest family that fits ({})", table.best_us / value, best->label)
                          : "no family fits";
    if (best != best_published)
      vs += best_published
                ? fmt::format(", {:.3f}x the fastest as published ({})",
                              objective_us(best_published->timeline, options.objective) / value, best_published->label)
                : ", none fits as published";
    std::printf("optimized: %s from %s; %s\n",
                placement_label(r.problem.placement, r.problem.chunks_per_device).c_str(), r.stats.start_family.c_str(),
                vs.c_str());
    std::printf("%s", gap_detail_lines(r).c_str());
    std::printf("%s\n", timing_line(options, r).c_str());
    if (const std::string line = partition_line(r); !line.empty()) std::printf("%s\n", line.c_str());
    if (!a.out_path.empty()) std::printf("wrote %s\n", a.out_path.c_str());
  } else {
    std::printf("%s", infeasible_text(options, r).c_str());
  }
  if (!a.report_path.empty()) std::printf("wrote %s\n", a.report_path.c_str());
}

std::string layout_cell(const LayoutRow& r) {
  return r.label() + ", " + std::to_string(r.microbatch_size) + " × " + std::to_string(r.num_microbatches);
}

nlohmann::json layout_json(const LayoutRow& r) {
  nlohmann::json j = {{"pp", r.pp},
                      {"tp", r.tp},
                      {"dp", r.dp},
                      {"microbatch_size", r.microbatch_size},
                      {"num_microbatches", r.num_microbatches},
                      {"status", r.status.ok() ? "ok" : status_code_name(r.status.code)},
                      {"bound_us", r.bound_us},
                      {"evaluated", r.evaluated}};
  if (!r.status.ok()) j["reason"] = r.status.message;
  if (r.fits)
    j.update({{"schedule", r.schedule},
              {"iteration_us", r.iteration_us},
              {"dp_exposed_us", r.dp_exposed_us},
              {"tokens_per_s", r.tokens_per_s},
              {"tflops_per_gpu", r.tflops_per_gpu},
              {"mfu", r.mfu},
              {"peak_bytes", r.peak_bytes},
              {"fits_any_timing", r.fits_any_timing}});
  return j;
}

// plan --search: the cluster's layouts ranked by throughput beside Megatron's default.
int run_layout_search(const PlanArgs& a, CLI::App* c) {
  if (a.global_batch < 1) return usage_error("--search needs --global-batch SEQUENCES");
  // The search chooses the degrees, microbatches and schedules itself, and writes no schedule:
  // an option it would ignore is refused, not dropped.
  static const std::vector<std::string> kTaken = {"--model",
                                                  "--cluster",
                                                  "--budget",
                                                  "--global-batch",
                                                  "--search",
                                                  "--time-limit",
                                                  "--seed",
                                                  "--quiet",
                                                  "--json",
                                                  "--gpus-per-host-link",
                                                  "--no-flash-attention"};
  for (const CLI::Option* opt : c->get_options())
    if (opt->count() > 0 && std::find(kTaken.begin(), kTaken.end(), opt->get_name()) == kTaken.end()) {
      std::string taken;
      for (const std::string& name : kTaken) taken += (taken.empty() ? "" : ", ") + name;
      return usage_error(opt->get_name() +
                         ": --search chooses the layout, microbatches and schedule itself and takes only " + taken);
    }
  Result<PlanInputs> in = plan_inputs(a);
  if (!in.ok()) return fail(in.status);
  const OptimizeOptions options = a.optimizer.parsed();
  LayoutSearchOptions o{.global_batch = a.global_batch,
                        .mem_budget_bytes = in.value.plan.mem_budget_bytes,
                        .time_limit_s = c->get_option("--time-limit")->count() > 0 ? options.time_limit_s : 60,
                        .seed = options.seed};
  if (!a.optimizer.quiet)
    o.progress = [](const LayoutRow& r, int done, int screened) {
      std::fprintf(stderr, "[%d/%d] %-18s %s\n", done, screened, layout_cell(r).c_str(),
                   r.fits ? (format_us(r.iteration_us) + " " + r.schedule).c_str() : r.status.message.c_str());
    };
  Result<LayoutSearch> found = search_layouts(in.value.model, in.value.cluster, o);
  if (!found.ok()) return fail(found.status);
  const LayoutSearch& ls = found.value;
  const LayoutRow& def = ls.megatron_default;
  const bool any = !ls.rows.empty() && ls.rows[0].fits;
  if (a.as_json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const LayoutRow& r : ls.rows) rows.push_back(layout_json(r));
    print_json(
        {{"model", a.model},
         {"cluster", a.cluster},
         {"global_batch", a.global_batch},
         {"layouts", ls.layouts},
         {"evaluated", ls.evaluated},
         {"wall_s", ls.wall_s},
         {"megatron_default", layout_json(def)},
         {"speedup_vs_megatron_default",
          any && def.fits ? nlohmann::json(def.iteration_us / ls.rows[0].iteration_us) : nlohmann::json(nullptr)},
         {"rows", rows}});
    return any ? kExitOk : kExitInfeasible;
  }
  std::vector<std::vector<std::string>> table = {{"rank", "layout, microbatches", "schedule", "iteration", "tokens/s",
                                                  "TFLOP/s/GPU", "MFU", "peak memory", "fits", "vs default"}};
  int rank = 0;
  auto add = [&](const std::string& first, const LayoutRow& r) {
    table.push_back({first, layout_cell(r), r.schedule, format_us(r.iteration_us),
                     fmt::format("{:.0f}", r.tokens_per_s), fmt::format("{:.0f}", r.tflops_per_gpu),
                     fmt::format("{:.1f}%", 100 * r.mfu), format_bytes(r.peak_bytes),
                     fits_cell(r.fits_any_timing, r.fits),
                     def.fits ? fmt::format("{:.3f}x", def.iteration_us / r.iteration_us) : "-"});
  };
  for (const LayoutRow& r : ls.rows)
    if (r.fits && rank < 25) add(std::to_string(++rank), r);
  if (def.fits) add("default", def);
  std::printf("%s on %s, global batch %lld sequences of %d tokens: %d layouts, %d evaluated in %.1f s\n\n%s",
              a.model.c_str(), a.cluster.c_str(), static_cast<long long>(a.global_batch), in.value.model.seq_len,
              ls.layouts, ls.evaluated, ls.wall_s, aligned_table(table).c_str());
  std::printf(
      "\ndefault: Megatron's — tensor parallelism across the node, 1F1B with the least selective recompute "
      "that fits%s\n",
      def.fits ? "" : (": " + def.status.message).c_str());
  if (any && def.fits)
    std::printf("best: %s, %s — %.3fx the default\n", layout_cell(ls.rows[0]).c_str(), ls.rows[0].schedule.c_str(),
                def.iteration_us / ls.rows[0].iteration_us);
  int not_fitting = 0, refused = 0, waiting = 0;
  for (const LayoutRow& r : ls.rows) {
    if (r.evaluated)
      not_fitting += !r.fits;
    else
      (r.bound_us > 0 ? waiting : refused)++;
  }
  std::printf(
      "%d searched found nothing that fits; %d refused before any search (static memory, the model's shape); "
      "%d passed the screen but were left unsearched (by bound, within the time limit)\n",
      not_fitting, refused, waiting);
  return any ? kExitOk : kExitInfeasible;
}

int run_plan(const PlanArgs& a, CLI::App* c) {
  if (a.search) return run_layout_search(a, c);
  PlannedFor planned_for;
  Result<Problem> problem = plan_problem(a, &planned_for);
  if (!problem.ok()) return fail(problem.status);
  OptimizeOptions options = a.optimizer.parsed();
  if (Status st = a.optimizer.apply_partition(&problem.value, &options); !st.ok()) return fail(st);
  const Problem& p = problem.value;
  const bool charts = !a.report_path.empty();
  OptimizeResult r;
  std::vector<FamilyRun> runs = families_then_optimize(p, {.op_times = charts, .memory_curve = charts}, options, &r);
  if (!r.status.ok()) return fail(r.status);
  const bool fits = r.outcome != Outcome::kInfeasible;

  const FamilyRun* best = fastest_fitting(runs, options.objective);
  const FamilyRun* best_published = fastest_fitting(runs, options.objective, /*as_published_only=*/true);
  PlanTable table(options.objective);
  table.best_us = best ? objective_us(best->timeline, options.objective) : 0;
  const std::vector<bool> shown = at_best_chunks(runs, options.objective);
  for (size_t k = 0; k < runs.size(); k++) {
    const FamilyRun& o = runs[k];
    if (o.status.ok())
      table.add(o.label, o.built.problem, o.timeline, o.fits,
                lower_bound_for(o.built.problem, o.fits, options.objective), tuning_json(o), shown[k]);
    else
      table.add_not_applicable(o, shown[k]);
  }
  table.hidden = static_cast<int>(std::count(shown.begin(), shown.end(), false));
  table.add("optimized", r.problem, r.timeline, fits,
            fits ? r.lower_bound_us : lower_bound_for(r.problem, false, options.objective));
  if (Status st = write_plan_files(a, p, planned_for, r, runs); !st.ok()) return fail(st);

  if (!a.as_json) {
    print_plan(a, p, planned_for, options, r, best, best_published, table);
    return fits ? kExitOk : kExitInfeasible;
  }
  nlohmann::json j = {{"model", a.model},
                      {"cluster", a.cluster},
                      {"problem", problem_summary_json(p)},
                      {"schedules", table.json},
                      {"outcome", outcome_name(r.outcome)},
                      {"timing", options.any_timing ? "any" : "exact"},
                      {"objective", objective_name(options.objective)},
                      {"rules", rules_json(options.rules)},
                      {"best_family", baseline_json(baseline_of(best, options.objective))},
                      {"best_published_family", baseline_json(baseline_of(best_published, options.objective))},
                      {"needed_budget_bytes", r.needed_budget_bytes},
                      {"budget_lower_bound_bytes", r.budget_lower_bound_bytes},
                      {"frugal_budget_bytes", r.frugal_budget_bytes},
                      {"uniform_budget_lower_bound_bytes", r.uniform_budget_lower_bound_bytes},
                      {"frugal_schedule", r.frugal_label},
                      {"partition", partition_json(r.problem)},
                      {"search",
                       {{"wall_s", r.stats.wall_s},
                        {"evaluations", r.stats.evaluations},
                        {"stopped_by_time", r.stats.stopped_by_time}}}};
  if (fits && !a.out_path.empty()) j["schedule_file"] = a.out_path;
  if (charts) j["report_file"] = a.report_path;
  print_json(j);
  return fits ? kExitOk : kExitInfeasible;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand(
      "plan", "model + cluster + budget: every family and the optimizer, one table, the best schedule");
  c->add_option("--model", a->model, "model preset (llama2-7b, llama2-13b, llama2-70b, gpt-7b, gpt-14b, gpt-tiny)");
  c->add_option("--cluster", a->cluster, "<count>x<gpu>: gpu one of a100-40gb, a100-80gb, h100, h200");
  c->add_option("--budget", a->budget, "memory per GPU, e.g. 60GiB (default: 90% of its HBM)");
  c->add_option("--microbatches", a->microbatches, "per iteration (default: 4 × GPUs)")->check(CLI::Range(1, 100000));
  c->add_option("--microbatch-size", a->microbatch_size, "sequences per microbatch")->check(CLI::Range(1, 4096));
  c->add_option("--gpus-per-host-link", a->gpus_per_host_link, "GPUs sharing one host link")
      ->check(CLI::Range(1, 4096));
  c->add_option("--profile", a->profile_path, "measured profile JSON overriding the formulas");
  c->add_flag("--no-flash-attention", a->no_flash_attention,
              "keep attention scores for backward (no selective recompute): 5as²b more bytes a layer");
  a->optimizer.add_to(c);
  c->add_option("--out,-o", a->out_path, "where to write the best schedule");
  c->add_option("--report", a->report_path, "also write an HTML report here");
  c->add_option("--problem-out", a->problem_out_path,
                "also write the problem built from the model (for simulate, optimize, ...)");
  add_json_flag(c, &a->as_json);
  c->add_option("--tp", a->tp, "tensor-parallel degree, within a node")->check(CLI::Range(1, 64));
  c->add_option("--dp", a->dp, "data-parallel degree (pipeline stages: GPUs / (tp × dp))")->check(CLI::Range(1, 4096));
  c->add_flag("--no-sequence-parallel", a->no_sequence_parallel, "with --tp: activations not sharded");
  c->add_flag("--no-distributed-optimizer", a->no_distributed_optimizer,
              "with --dp: optimizer state not sharded over data-parallel ranks");
  c->add_option("--global-batch", a->global_batch, "sequences per iteration (microbatches = it / (dp × size))")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  c->add_flag("--search", a->search,
              "rank the cluster's layouts (pipeline, tensor, data degrees, microbatches) for --global-batch; "
              "--time-limit defaults to 60 s");
  return {c, [a, c] { return run_plan(*a, c); }};
}

}  // namespace optpipe
