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
  int seq_len = 0;                  // 0: the model's
  int gpus_per_host_link = 0;       // 0: the cluster preset's
  bool no_flash_attention = false;  // keep the attention scores (no selective recompute)
  int tp = 1, dp = 1, cp = 1;
  bool no_sequence_parallel = false, no_distributed_optimizer = false, tp_comm_overlap = false;
  std::string precision = "bf16";
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
  if (a.seq_len > 0) in.model.seq_len = a.seq_len;
  Result<ClusterSpec> cluster = find_cluster(a.cluster);
  if (!cluster.ok()) return R::Error(cluster.status);
  in.cluster = cluster.value;
  if (a.gpus_per_host_link > 0) in.cluster.gpus_per_host_link = a.gpus_per_host_link;
  PlanSpec& plan = in.plan;
  plan.num_microbatches = a.microbatches;
  plan.microbatch_size = a.microbatch_size;

  plan.tp = a.tp;
  plan.dp = a.dp;
  plan.cp = a.cp;
  plan.sequence_parallel = !a.no_sequence_parallel;
  plan.distributed_optimizer = !a.no_distributed_optimizer;
  plan.tp_comm_overlap = a.tp_comm_overlap;
  Result<Precision> precision = parse_precision(a.precision);
  if (!precision.ok()) return R::Error(Status::Invalid("--precision: " + precision.status.message));
  plan.precision = precision.value;
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
Result<Problem> model_problem(const PlanArgs& a, PlannedFor* pf) {
  using R = Result<Problem>;
  Result<PlanInputs> in = plan_inputs(a);
  if (!in.ok()) return R::Error(in.status);
  Result<Problem> problem = build_problem(in.value.model, in.value.cluster, in.value.plan);
  if (!problem.ok()) return problem;
  *pf = planned_for(in.value.model, a.model, a.cluster, in.value.plan, problem.value);
  if (a.profile_path.empty()) return problem;
  Result<std::string> text = read_text_file(a.profile_path);
  if (!text.ok()) return R::Error(text.status);
  if (Status st = apply_profile(text.value, &problem.value); !st.ok())
    return R::Error(Status::Invalid(a.profile_path + ": " + st.message));
  return problem;
}

// The text table from the rows of plan_rows_json: those it marks in_table.
struct PlanTable {
  std::vector<std::vector<std::string>> rows;
  int hidden = 0;  // runs of the JSON the text table leaves out (the interleaved families at other counts)
  PlanTable(const nlohmann::json& json_rows, Objective objective) {
    rows = {{"schedule", "fits", objective_name(objective), "idle", "peak memory", "speed-up", "lower bound", "gap"}};
    for (const nlohmann::json& j : json_rows) {
      if (!j.value("in_table", true)) {
        hidden++;
        continue;
      }
      const std::string name = j["schedule"];
      if (j.contains("status")) {
        rows.push_back({name, "n/a", "-", "-", "-", "-", "-", j.value("reason", "")});
        continue;
      }
      const double value = j[objective == Objective::kSpan ? "max_span_us" : "makespan_us"];
      const double speedup = j["speedup_vs_best_family"];
      rows.push_back({name, fits_cell(j["fits_any_timing"], j["fits_budget"]), format_us(value),
                      fmt::format("{:.1f}%", 100 * j["bubble_ratio"].get<double>()),
                      format_bytes(j["peak_bytes"].get<int64_t>()), speedup > 0 ? fmt::format("{:.3f}x", speedup) : "-",
                      format_us(j["lower_bound_us"]), fmt::format("{:.1f}%", 100 * j["gap"].get<double>())});
    }
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
                const OptimizeResult& r, const FamilyRun* best, const FamilyRun* best_published, const PlanTable& table,
                const std::optional<IterationFigures>& iteration) {
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
    std::string vs = best ? fmt::format("{:.3f}x the fastest family that fits ({})",
                                        objective_us(best->timeline, options.objective) / value, best->label)
                          : "no family fits";
    if (best != best_published)
      vs += best_published
                ? fmt::format(", {:.3f}x the fastest as published ({})",
                              objective_us(best_published->timeline, options.objective) / value, best_published->label)
                : ", none fits as published";
    std::printf("optimized: %s from %s; %s\n",
                placement_label(r.problem.placement, r.problem.chunks_per_device).c_str(), r.stats.start_family.c_str(),
                vs.c_str());
    if (iteration)
      std::printf(
          "iteration: %s = pipeline %s + data-parallel reduction %s + optimizer step %s; %.0f tokens/s/GPU, %.0f model "
          "TFLOP/s/GPU (MFU %.1f%%)\n",
          format_us(iteration->iteration_us).c_str(), format_us(iteration->pipeline_us).c_str(),
          format_us(iteration->dp_exposed_us).c_str(), format_us(iteration->optimizer_us).c_str(),
          iteration->tokens_per_s_per_gpu, iteration->model_tflops_per_gpu, 100 * iteration->mfu);
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
                      {"cp", r.cp},
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
              {"optimizer_us", r.optimizer_us},
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
                                                  "--seq-len",
                                                  "--time-limit",
                                                  "--seed",
                                                  "--quiet",
                                                  "--json",
                                                  "--gpus-per-host-link",
                                                  "--no-flash-attention",
                                                  "--cp",
                                                  "--precision",
                                                  "--tp-comm-overlap"};
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
                        .seed = options.seed,
                        .precision = in.value.plan.precision,
                        .tp_comm_overlap = a.tp_comm_overlap};
  if (c->get_option("--cp")->count() > 0) o.max_cp = a.cp;
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
  PlannedFor pf;
  Result<Problem> problem = model_problem(a, &pf);
  if (!problem.ok()) return fail(problem.status);
  OptimizeOptions options = a.optimizer.parsed();
  if (Status st = a.optimizer.apply_partition(&problem.value, &options); !st.ok()) return fail(st);
  const bool charts = !a.report_path.empty();
  const PlanReport report = plan_problem(problem.value, pf, options, {.op_times = charts, .memory_curve = charts});
  const OptimizeResult& r = report.result;
  if (!r.status.ok()) return fail(r.status);
  const bool fits = r.outcome != Outcome::kInfeasible;
  if (Status st = write_plan_files(a, report.problem, pf, r, report.runs); !st.ok()) return fail(st);
  if (!a.as_json) {
    const PlanTable table(plan_rows_json(report, options.objective), options.objective);
    print_plan(a, report.problem, pf, options, r, fastest_fitting(report.runs, options.objective),
               fastest_fitting(report.runs, options.objective, /*as_published_only=*/true), table,
               plan_iteration(report));
    return fits ? kExitOk : kExitInfeasible;
  }
  nlohmann::json j = plan_json(report, options);
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
  c->add_option("--model", a->model,
                "model preset (llama3-8b, llama3-70b, llama3.1-405b, llama2-7b, llama2-13b, llama2-70b, gpt-7b, "
                "gpt-14b, gpt-tiny) or a Hugging Face config.json path");
  c->add_option("--seq-len", a->seq_len, "tokens a sequence (default: the model's)")->check(CLI::Range(1, 1 << 22));
  c->add_option("--cluster", a->cluster,
                "<count>x<gpu>: gpu one of a100-40gb, a100-80gb, h100, h200, b200, gb200, gb300");
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
  c->add_option("--dp", a->dp, "data-parallel degree (pipeline stages: GPUs / (tp × cp × dp))")
      ->check(CLI::Range(1, 4096));
  c->add_option("--cp", a->cp,
                "context-parallel degree: each sequence split over this many GPUs (with --search: the most tried)")
      ->check(CLI::Range(1, 64));
  c->add_option("--precision", a->precision, "bf16, or fp8 for the layers' GEMMs (Transformer Engine)");
  c->add_flag("--tp-comm-overlap", a->tp_comm_overlap,
              "tensor-parallel collectives overlapped with the GEMMs (Megatron's --tp-comm-overlap)");
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
