// optpipe — command-line front end. Exit codes: 0 ok, 1 bad input, 2 usage, 3 infeasible
// (a schedule over its budget, nothing fits), 70 internal error (a bug: please report it).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unistd.h>
#include <iostream>
#include <nlohmann/json.hpp>

#include "optpipe/cost_model.h"
#include "optpipe/export.h"
#include "optpipe/families.h"
#include "optpipe/figures.h"
#include "optpipe/json_io.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/problem.h"
#include "optpipe/simulate.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"
#include "cli.h"
#include "inputs.h"
#include "report.h"

using namespace optpipe;
using json = nlohmann::json;

namespace {

// "vshape v2": a placement and its chunks per device, as the tables show them.
std::string placement_label(Placement p, int chunks_per_device) {
  return std::string(placement_name(p)) + " v" + std::to_string(chunks_per_device);
}
std::string placement_label(const Family& f) { return placement_label(f.placement, f.chunks_per_device); }

// Paths in the output may hold bytes that are not UTF-8: replaced, never thrown on.
void print_json(const json& j) { std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str()); }

int cmd_families(bool as_json) {
  if (as_json) {
    json out = json::array();
    for (const Family& f : families())
      out.push_back({{"name", f.name},
                     {"placement", placement_name(f.placement)},
                     {"chunks_per_device", f.chunks_per_device},
                     {"description", f.description}});
    print_json({{"families", out}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"family", "placement", "description"}};
  for (const Family& f : families())
    rows.push_back({f.name, placement_label(f),
                    f.description});
  std::fputs(aligned_table(rows).c_str(), stdout);
  return kExitOk;
}

// Validates (structure, deadlock; not the budget) and simulates.
Result<Timeline> checked_timeline(const FamilySchedule& fs, const std::string& what, const SimOptions& sim = {}) {
  Validation v = validate(fs.problem, fs.schedule, {.check_memory_budget = false, .sim = sim});
  if (!v.ok()) return Result<Timeline>::Error(Status::Invalid(what + " is not a valid schedule for this problem:\n" + v.summary()));
  return Result<Timeline>::Of(std::move(v.sim.timeline));
}

int cmd_schedule(const std::string& problem_path, const std::string& family, int chunks, const std::string& out_path,
                 bool as_json) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  const Family* f = find_family(family);
  if (!f) return fail(Status::Invalid("unknown family \"" + family + "\" (see: optpipe families)"));
  Result<FamilySchedule> fs = build_family(*f, p.value, chunks);
  if (!fs.ok()) return fail(fs.status);
  Result<Timeline> checked = checked_timeline(fs.value, "family " + family);
  OPTPIPE_CHECK(checked.ok(), checked.status.message);
  const Timeline& t = checked.value;
  if (Status st = emit(out_path, schedule_to_json(fs.value.schedule)); !st.ok()) return fail(st);
  if (out_path.empty() || out_path == "-") return kExitOk;
  if (as_json) {
    json j = timeline_json(fs.value.problem, t);
    j["family"] = family;
    j["schedule_file"] = out_path;
    print_json(j);
  } else {
    std::printf("%s: wrote %s\n%s", family.c_str(), out_path.c_str(), timeline_text(fs.value.problem, t).c_str());
  }
  return kExitOk;
}

// With `noise` (samples > 0), also the noise evaluation.
int cmd_simulate(const std::string& problem_path, const std::string& schedule_path, const std::optional<NoiseSpec>& noise,
                 bool as_json) {
  Result<FamilySchedule> fs = load_schedule(problem_path, schedule_path, "", 0);
  if (!fs.ok()) return fail(fs.status);
  const Problem& problem = fs.value.problem;
  Result<Timeline> t = checked_timeline(fs.value, schedule_path);
  if (!t.ok()) return fail(t.status);
  const bool fits = fits_budget(problem, t.value);
  Result<NoiseReport> noisy;
  if (noise) {
    noisy = evaluate_noise(problem, fs.value.schedule, *noise);
    if (!noisy.ok()) return fail(noisy.status);
  }
  if (as_json) {
    json j = timeline_json(problem, t.value);
    j["problem"] = problem_summary_json(problem);
    if (noise) j["noise"] = noise_json(*noise, noisy.value);
    print_json(j);
  } else {
    std::printf("problem: %s\n%s", problem_summary(problem).c_str(), timeline_text(problem, t.value).c_str());
    if (noise) std::printf("\n%s", noise_text(problem, *noise, noisy.value).c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

int cmd_export(const std::string& problem_path, const std::string& schedule_path, const std::string& family, int chunks,
               const std::string& format, const std::string& out_path) {
  if (schedule_path.empty() == family.empty()) return usage_error("give either --schedule FILE or --family NAME");
  Result<FamilySchedule> fs = load_schedule(problem_path, schedule_path, family, chunks);
  if (!fs.ok()) return fail(fs.status);
  const std::string what = family.empty() ? schedule_path : family;
  Result<Timeline> t = checked_timeline(fs.value, what, {.op_times = true, .memory_curve = true});
  if (!t.ok()) return fail(t.status);
  const Problem& p = fs.value.problem;
  const Schedule& s = fs.value.schedule;
  std::string text;
  if (format == "json") {
    text = schedule_to_json(s);
  } else if (format == "trace") {
    text = chrome_trace_json(p, s, t.value);
  } else if (format == "svg") {
    text = schedule_svg(p, s, t.value, what);
  } else {  // csv
    CsvExport csv = pytorch_csv(s);
    for (const std::string& note : csv.notes) std::fprintf(stderr, "optpipe: note: %s\n", note.c_str());
    text = csv.csv;
  }
  Status st = emit(out_path, text);
  return st.ok() ? kExitOk : fail(st);
}

int64_t max_peak(const Timeline& t) {
  int64_t peak = 0;
  for (const DeviceFigures& d : t.devices) peak = std::max(peak, d.peak_bytes);
  return peak;
}

int cmd_compare(const std::string& problem_path, const std::optional<NoiseSpec>& noise, bool as_json) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  json rows_json = json::array();
  std::vector<std::vector<std::string>> rows = {
      {"family", "placement", "makespan", "lower bound", "bubble", "peak memory", "worst case", "fits", "peak per device"}};
  if (noise) rows[0].insert(rows[0].begin() + 3, {"p50 noisy", "p95 noisy", "over budget", "stuck"});
  int num_fit = 0;
  for (const FamilyRun& o : run_families(p.value, {.op_times = false})) {
    const Family& f = *o.family;
    if (!o.status.ok()) {
      rows.push_back({f.name, placement_label(f), "-", "-", "-", "-", "-", "n/a", o.status.message});
      if (noise) rows.back().insert(rows.back().begin() + 3, {"-", "-", "-", "-"});
      rows_json.push_back({{"family", f.name}, {"status", "not applicable"}, {"reason", o.status.message}});
      continue;
    }
    const Timeline& t = o.timeline;
    num_fit += o.fits;
    // One unit for the row: GiB, or MiB when every device stays under 1 GiB.
    const bool gib = max_peak(t) >= (1ll << 30);
    std::string per_device;
    for (const DeviceFigures& d : t.devices) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.1f", per_device.empty() ? "" : " ", d.peak_bytes / double(gib ? 1ll << 30 : 1 << 20));
      per_device += buf;
    }
    char bubble[32];
    std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * t.bubble_ratio);
    // The fastest any schedule of this placement that fits the budget could be.
    const double bound = makespan_lower_bound(o.built.problem);
    int64_t worst = 0;
    for (const DeviceFigures& d : t.devices) worst = std::max(worst, d.worst_peak_bytes);
    rows.push_back({f.name, placement_label(f), format_us(t.makespan_us), format_us(bound), bubble,
                    format_bytes(max_peak(t)), format_bytes(worst), fits_cell(o.fits_any_timing, o.fits),
                    per_device + (gib ? " GiB" : " MiB")});
    json j = timeline_json(o.built.problem, t);
    if (noise) {
      Result<NoiseReport> r = evaluate_noise(o.built.problem, o.built.schedule, *noise);
      if (!r.ok()) return fail(r.status);
      const NoiseReport& n = r.value;
      const std::string of = " of " + std::to_string(n.samples);
      rows.back().insert(rows.back().begin() + 3,
                         {std::isnan(n.p50_makespan_us) ? "-" : format_us(n.p50_makespan_us),
                          std::isnan(n.p95_makespan_us) ? "-" : format_us(n.p95_makespan_us),
                          std::to_string(n.overflowed) + of, std::to_string(n.stuck) + of});
      j["noise"] = noise_json(*noise, n);
    }
    j["lower_bound_us"] = bound;
    j["family"] = f.name;
    j["status"] = "ok";
    j["placement"] = placement_name(o.built.problem.placement);
    j["chunks_per_device"] = o.built.problem.chunks_per_device;
    rows_json.push_back(j);
  }
  if (as_json) {
    print_json({{"problem", problem_summary_json(p.value)}, {"families", rows_json}, {"num_fit", num_fit}});
  } else {
    std::printf("problem: %s\n\n%s", problem_summary(p.value).c_str(), aligned_table(rows).c_str());
    if (noise)
      std::printf("\nnoisy: %d samples, per-op jitter σ %g, profile error σ %g, seed %llu; over budget: the samples in "
                  "which a device passes its budget as planned (out of memory on a GPU); stuck: those in which, "
                  "holding allocations until frees make room, nothing can\n",
                  noise->samples, noise->jitter_sigma, noise->profile_sigma, static_cast<unsigned long long>(noise->seed));
  }
  return num_fit > 0 ? kExitOk : kExitInfeasible;
}

// The families for a table beside the optimizer, within the time limit: built until the limit
// (and a quarter second) has passed; the optimizer then gets what is left of it.
std::vector<FamilyRun> families_then_optimize(const Problem& p, const SimOptions& sim, OptimizeOptions* options,
                                              OptimizeResult* r) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(options->time_limit_s);
  std::vector<FamilyRun> runs =
      run_families(p, sim, t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit) + std::chrono::milliseconds(250));
  const double spent_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  options->time_limit_s = std::max(0.01, options->time_limit_s - spent_s);
  *r = optimize(p, *options);
  return runs;
}

// The comparison table's rows: every family, and the optimized schedule.
std::vector<ReportRow> family_rows(const std::vector<FamilyRun>& runs) {
  std::vector<ReportRow> rows;
  for (const FamilyRun& o : runs)
    rows.push_back({o.family->name, placement_label(*o.family), o.status.ok(), o.status.message, o.timeline.makespan_us,
                    o.timeline.bubble_ratio, o.status.ok() ? max_peak(o.timeline) : 0, o.fits});
  return rows;
}

ReportRow optimized_row(const OptimizeResult& r) {
  return {"optimized", placement_label(r.problem.placement, r.problem.chunks_per_device),
          true, "", r.timeline.makespan_us, r.timeline.bubble_ratio, max_peak(r.timeline), r.outcome != Outcome::kInfeasible};
}

// The charts: the optimized schedule beside the fastest family that fits, then any asked for.
std::vector<ReportChart> report_charts(const OptimizeResult& r, const std::vector<FamilyRun>& runs,
                                       const std::vector<std::string>& chart_families) {
  const FamilyRun* best = fastest_fitting(runs);
  std::vector<ReportChart> charts;
  charts.push_back({r.outcome == Outcome::kInfeasible ? "Optimized (best found; over the budget)" : "Optimized",
                    schedule_svg(r.problem, r.schedule, r.timeline, "optimized")});
  if (best)
    charts.push_back({std::string("Fastest family that fits: ") + best->family->name,
                      schedule_svg(best->built.problem, best->built.schedule, best->timeline, best->family->name)});
  for (const std::string& name : chart_families)
    for (const FamilyRun& o : runs)
      if (name == o.family->name && &o != best && o.status.ok())
        charts.push_back({name, schedule_svg(o.built.problem, o.built.schedule, o.timeline, name)});
  return charts;
}

// The HTML page: the comparison table (every family and the optimized schedule), then the charts.
int cmd_report(const std::string& problem_path, const std::vector<std::string>& chart_families, const OptimizeOptions& options,
               const std::string& out_path) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  for (const std::string& name : chart_families)
    if (!find_family(name)) return fail(Status::Invalid("unknown family \"" + name + "\" (see: optpipe families)"));
  OptimizeOptions limited = options;
  OptimizeResult r;
  std::vector<FamilyRun> runs = families_then_optimize(p.value, {.op_times = true, .memory_curve = true}, &limited, &r);
  if (!r.status.ok()) return fail(r.status);
  std::vector<ReportRow> rows = family_rows(runs);
  rows.push_back(optimized_row(r));
  std::string html = html_report("optpipe report", problem_summary(p.value), rows, report_charts(r, runs, chart_families));
  Status st = emit(out_path, html);
  if (!st.ok()) return fail(st);
  if (!out_path.empty() && out_path != "-") std::fprintf(stderr, "optpipe: wrote %s\n", out_path.c_str());
  return r.outcome != Outcome::kInfeasible ? kExitOk : kExitInfeasible;
}

// Which memory rule the answer was held to, and what holding it cost.
std::string timing_line(const OptimizeOptions& options, const OptimizeResult& r) {
  std::string line =
      !options.any_timing
          ? "timing: exact — fits the budget at the profile's timings, not necessarily if they drift"
          : fmt::format("timing: any — fits the budget under any timing ({} WAIT(s) and {} reload gate(s) added, "
                        "no cost at the profile's timings)",
                        r.stats.waits_added, r.stats.reload_gates_added);
  if (options.robust_sigma > 0)
    line += fmt::format("\nrobust: candidates scored by their p90 makespan over {} samples of per-op jitter σ {}",
                        options.robust_samples, options.robust_sigma);
  return line;
}

void print_progress(const Progress& g) {
  const std::string best = g.best_makespan_us > 0 ? format_us(g.best_makespan_us) : std::string("none fits yet");
  const std::string gap =
      g.best_makespan_us > 0 ? fmt::format("{:.1f}%", 100 * (g.best_makespan_us - g.lower_bound_us) / g.best_makespan_us) : "-";
  std::fprintf(stderr, "[%6.1fs] %9lld candidates  best %-12s bound %-12s gap %s\n", g.elapsed_s,
               static_cast<long long>(g.evaluations), best.c_str(), format_us(g.lower_bound_us).c_str(), gap.c_str());
}

int cmd_optimize(const std::string& problem_path, const OptimizeOptions& base_options, bool quiet, bool as_json,
                 const std::string& out_path) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  OptimizeOptions options = base_options;
  if (!quiet) options.progress = print_progress;
  OptimizeResult r = optimize(p.value, options);
  if (!r.status.ok()) return fail(r.status);

  const Timeline& t = r.timeline;
  const bool has_baseline = !r.stats.baseline_family.empty();
  const double idle_reduction = has_baseline && r.stats.baseline_idle_us > 0 ? 1 - t.idle_us / r.stats.baseline_idle_us : 0;
  const bool fits = r.outcome != Outcome::kInfeasible;
  if (fits && !out_path.empty()) {
    if (Status st = write_text_file(out_path, schedule_to_json(r.schedule)); !st.ok()) return fail(st);
  }
  if (as_json) {
    json j = timeline_json(r.problem, t);
    j["outcome"] = outcome_name(r.outcome);
    j["lower_bound_us"] = r.lower_bound_us;
    j["gap"] = r.gap;
    j["placement"] = placement_name(r.problem.placement);
    j["chunks_per_device"] = r.problem.chunks_per_device;
    j["best_baseline"] = has_baseline ? json{{"family", r.stats.baseline_family}, {"makespan_us", r.stats.baseline_makespan_us}}
                                      : json(nullptr);
    j["idle_reduction_vs_best_baseline"] = idle_reduction;
    j["needed_budget_bytes"] = r.needed_budget_bytes;
    j["budget_lower_bound_bytes"] = r.budget_lower_bound_bytes;
    j["timing"] = options.any_timing ? "any" : "exact";
    j["robust"] = options.robust_sigma > 0 ? json{{"sigma", options.robust_sigma}, {"samples", options.robust_samples}} : json(nullptr);
    j["stats"] = {{"wall_s", r.stats.wall_s},
                  {"evaluations", r.stats.evaluations},
                  {"improvements", r.stats.improvements},
                  {"stopped_by_time", r.stats.stopped_by_time},
                  {"start_family", r.stats.start_family},
                  {"start_makespan_us", r.stats.start_makespan_us},
                  {"placements_searched", r.stats.placements_searched},
                  {"exact_solves", r.stats.exact_solves},
                  {"exact_nodes", r.stats.exact_nodes},
                  {"recomputes_dropped", r.stats.recomputes_dropped},
                  {"offloads_dropped", r.stats.offloads_dropped},
                  {"waits_added", r.stats.waits_added},
                  {"reload_gates_added", r.stats.reload_gates_added},
                  {"seed", options.seed},
                  {"threads", options.threads}};
    if (fits && !out_path.empty()) j["schedule_file"] = out_path;
    print_json(j);
  } else {
    std::printf("problem: %s\n", problem_summary(p.value).c_str());
    if (has_baseline)
      std::printf("best family that fits: %s, %s\n", r.stats.baseline_family.c_str(),
                  format_us(r.stats.baseline_makespan_us).c_str());
    else
      std::printf("no family fits the budget\n");
    if (fits) {
      std::printf("optimized (%s v%d, from %s): %s, bubble %.1f%%, idle time %.1f%% lower than the best family\n",
                  placement_name(r.problem.placement), r.problem.chunks_per_device, r.stats.start_family.c_str(),
                  format_us(t.makespan_us).c_str(), 100 * t.bubble_ratio, 100 * idle_reduction);
      std::printf("lower bound %s, gap %.1f%%: %s\n", format_us(r.lower_bound_us).c_str(), 100 * r.gap, outcome_name(r.outcome));
      std::printf("%s\n", timing_line(options, r).c_str());
    } else {
      std::printf("nothing found fits the budget; the best schedule found needs per device:");
      for (size_t d = 0; d < r.needed_budget_bytes.size(); d++)
        std::printf(" %s", format_bytes(r.needed_budget_bytes[d]).c_str());
      std::printf("\n(no schedule can fit in less than:");
      for (int64_t b : r.budget_lower_bound_bytes) std::printf(" %s", format_bytes(b).c_str());
      std::printf(")\n");
    }
    if (r.stats.exact_solves > 0)
      std::printf("exact models (CP on Gecode, MILP on CBC): %d solve(s), %lld nodes\n", r.stats.exact_solves,
                  static_cast<long long>(r.stats.exact_nodes));
    std::printf("search: %lld candidates in %.2f s, %lld improvements, %d needless recompute(s) and %d offload(s) "
                "taken out, seed %llu, %d thread(s)%s\n\n",
                static_cast<long long>(r.stats.evaluations), r.stats.wall_s, static_cast<long long>(r.stats.improvements),
                r.stats.recomputes_dropped, r.stats.offloads_dropped,
                static_cast<unsigned long long>(options.seed), options.threads,
                r.stats.stopped_by_time ? "; stopped by the time limit, so another run may differ"
                : r.stats.exact_solves > 0 ? "; the exact models ran for the time left, so another run may differ" : "");
    std::printf("%s", timeline_text(r.problem, t).c_str());
    if (fits && !out_path.empty()) std::printf("\nwrote %s\n", out_path.c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

struct PlanArgs {
  std::string model = "llama2-13b";
  std::string cluster = "8xa100-40gb";
  std::string budget;  // empty: 90% of HBM
  std::string profile_path;
  std::string partition = "balanced";
  std::string report_path;
  std::string out_path = "optpipe_schedule.json";
  std::string problem_out_path;
  int microbatches = 0;
  int microbatch_size = 1;
  int gpus_per_host_link = 0;  // 0: the cluster preset's
  bool no_flash_attention = false;  // keep the attention scores (no selective recompute)
};

// The main job: model + cluster + budget → every family and the optimizer, one table, the
// best schedule written.
int cmd_plan(const PlanArgs& a, const OptimizeOptions& base_options, bool quiet, bool as_json) {
  Result<ModelSpec> model = find_model(a.model);
  if (!model.ok()) return fail(model.status);
  ModelSpec model_spec = model.value;
  model_spec.flash_attention = !a.no_flash_attention;
  Result<ClusterSpec> cluster = find_cluster(a.cluster);
  if (!cluster.ok()) return fail(cluster.status);
  if (a.gpus_per_host_link > 0) cluster.value.gpus_per_host_link = a.gpus_per_host_link;
  PlanSpec plan;
  plan.num_microbatches = a.microbatches;
  plan.microbatch_size = a.microbatch_size;
  plan.partition = a.partition == "uniform" ? Partition::kUniform : Partition::kBalanced;
  if (!a.budget.empty() && (!parse_bytes(a.budget, &plan.mem_budget_bytes) || plan.mem_budget_bytes <= 0))
    return fail(Status::Invalid("--budget: expected a positive size such as 60GiB, got \"" + a.budget + "\""));
  Result<Problem> problem = build_problem(model_spec, cluster.value, plan);
  if (!problem.ok()) return fail(problem.status);
  if (!a.profile_path.empty()) {
    Result<std::string> text = read_text_file(a.profile_path);
    if (!text.ok()) return fail(text.status);
    if (Status st = apply_profile(text.value, &problem.value); !st.ok())
      return fail(Status::Invalid(a.profile_path + ": " + st.message));
  }
  const Problem& p = problem.value;

  OptimizeOptions options = base_options;
  if (!quiet) options.progress = print_progress;
  const bool charts = !a.report_path.empty();
  OptimizeResult r;
  std::vector<FamilyRun> outcomes = families_then_optimize(p, {.op_times = charts, .memory_curve = charts}, &options, &r);
  if (!r.status.ok()) return fail(r.status);
  const bool fits = r.outcome != Outcome::kInfeasible;

  const FamilyRun* best = fastest_fitting(outcomes);
  const double best_makespan = best ? best->timeline.makespan_us : 0;

  std::vector<std::vector<std::string>> rows = {
      {"schedule", "fits", "makespan", "idle", "peak memory", "speed-up", "lower bound", "gap"}};
  json rows_json = json::array();
  auto add_row = [&](const std::string& name, const Problem& fp, const Timeline& t, bool row_fits, double bound) {
    const double gap = t.makespan_us > 0 ? (t.makespan_us - bound) / t.makespan_us : 0;
    const double speedup = best_makespan > 0 && row_fits ? best_makespan / t.makespan_us : 0;
    const bool any = fits_any_timing(fp, t);
    rows.push_back({name, fits_cell(any, row_fits), format_us(t.makespan_us), fmt::format("{:.1f}%", 100 * t.bubble_ratio),
                    format_bytes(max_peak(t)), speedup > 0 ? fmt::format("{:.3f}x", speedup) : "-", format_us(bound),
                    fmt::format("{:.1f}%", 100 * gap)});
    rows_json.push_back({{"schedule", name},
                         {"placement", placement_name(fp.placement)},
                         {"chunks_per_device", fp.chunks_per_device},
                         {"fits_budget", row_fits},
                         {"fits_any_timing", any},
                         {"makespan_us", t.makespan_us},
                         {"bubble_ratio", t.bubble_ratio},
                         {"peak_bytes", max_peak(t)},
                         {"speedup_vs_best_fitting_family", speedup},
                         {"lower_bound_us", bound},
                         {"gap", gap}});
  };
  for (const FamilyRun& o : outcomes) {
    if (!o.status.ok()) {
      rows.push_back({o.family->name, "n/a", "-", "-", "-", "-", "-", o.status.message});
      rows_json.push_back({{"schedule", o.family->name}, {"status", "not applicable"}, {"reason", o.status.message}});
      continue;
    }
    add_row(o.family->name, o.built.problem, o.timeline, o.fits, makespan_lower_bound(o.built.problem));
  }
  add_row("optimized", r.problem, r.timeline, fits, r.lower_bound_us);

  if (fits && !a.out_path.empty())
    if (Status st = write_text_file(a.out_path, schedule_to_json(r.schedule)); !st.ok()) return fail(st);
  if (!a.problem_out_path.empty())
    if (Status st = write_text_file(a.problem_out_path, problem_to_json(p)); !st.ok()) return fail(st);
  if (charts) {
    std::vector<ReportRow> rows_html = family_rows(outcomes);
    rows_html.push_back(optimized_row(r));
    const std::string title = "optpipe plan: " + a.model + " on " + a.cluster;
    if (Status st = write_text_file(a.report_path, html_report(title, problem_summary(p), rows_html, report_charts(r, outcomes, {})));
        !st.ok())
      return fail(st);
  }

  const std::string what = a.model + " on " + a.cluster + ", " + std::to_string(p.num_microbatches) + " microbatches of " +
                           std::to_string(a.microbatch_size) + " × " + std::to_string(model_spec.seq_len) + " tokens";
  if (as_json) {
    json j = {{"model", a.model},
              {"cluster", a.cluster},
              {"problem", problem_summary_json(p)},
              {"schedules", rows_json},
              {"outcome", outcome_name(r.outcome)},
              {"timing", options.any_timing ? "any" : "exact"},
              {"best_fitting_family", best ? json(best->family->name) : json(nullptr)},
              {"needed_budget_bytes", r.needed_budget_bytes},
              {"search", {{"wall_s", r.stats.wall_s}, {"evaluations", r.stats.evaluations}, {"stopped_by_time", r.stats.stopped_by_time}}}};
    if (fits && !a.out_path.empty()) j["schedule_file"] = a.out_path;
    if (charts) j["report_file"] = a.report_path;
    print_json(j);
  } else {
    std::printf("%s\nproblem: %s\n\n%s\n", what.c_str(), problem_summary(p).c_str(), aligned_table(rows).c_str());
    if (fits) {
      std::printf("optimized: %s from %s; %s\n", placement_label(r.problem.placement, r.problem.chunks_per_device).c_str(),
                  r.stats.start_family.c_str(), best ? fmt::format("{:.3f}x the fastest family that fits ({})", best_makespan / r.timeline.makespan_us, best->family->name).c_str() : "no family fits");
      std::printf("%s\n", timing_line(options, r).c_str());
      if (!a.out_path.empty()) std::printf("wrote %s\n", a.out_path.c_str());
    } else {
      std::printf("nothing found fits the budget; the best schedule found needs %s on its fullest device\n",
                  format_bytes(*std::max_element(r.needed_budget_bytes.begin(), r.needed_budget_bytes.end())).c_str());
    }
    if (charts) std::printf("wrote %s\n", a.report_path.c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

// `run` and `profile` live in optpipe-runtime, the one program that links LibTorch, built next
// to this one: hand the whole command line over to it.
int exec_runtime(int argc, char** argv) {
  std::string path = executable_path();
  path = path.substr(0, path.rfind('/') + 1) + "optpipe-runtime";
  if (access(path.c_str(), X_OK) != 0)
    return fail(Status::Invalid(std::string("`optpipe ") + argv[1] +
                                "` needs the LibTorch runtime, which this build lacks (" + path +
                                " not found): install libtorch-dev, libgloo-dev and libopenblas0-pthread "
                                "(./scripts/setup.sh does) and build again"));
  std::vector<char*> args(argv, argv + argc);
  args[0] = path.data();
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  return fail(Status::Invalid("cannot start " + path));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "run" || std::string(argv[1]) == "profile")) return exec_runtime(argc, argv);
  CLI::App app{"optpipe: pipeline-parallel schedules under a memory budget"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "optpipe 0.1.0");

  std::string problem_path, schedule_path, out_path, family;
  bool as_json = false;
  int chunks = 0;
  auto add_problem = [&](CLI::App* c) {
    c->add_option("--problem,-p", problem_path, "problem JSON (default: the built-in problem)");
  };
  auto add_json = [&](CLI::App* c) { c->add_flag("--json", as_json, "print one JSON object on stdout"); };

  // Listed for --help; main() hands them to optpipe-runtime before parsing.
  app.add_subcommand("run", "execute a schedule for real on LibTorch + c10d and compare with the simulator (optpipe-runtime run --help)");
  app.add_subcommand("profile", "measure the runtime's model on this machine: profile and problem JSON (optpipe-runtime profile --help)");
  CLI::App* families_cmd = app.add_subcommand("families", "list the schedule families");
  add_json(families_cmd);

  CLI::App* problem_cmd = app.add_subcommand("problem", "write the built-in problem as JSON (a starting point to edit)");
  problem_cmd->add_option("--out,-o", out_path, "output file (default: stdout)");

  CLI::App* schedule_cmd = app.add_subcommand("schedule", "write one family's schedule as JSON");
  add_problem(schedule_cmd);
  schedule_cmd->add_option("--family,-f", family, "family name (see: optpipe families)")->required();
  schedule_cmd->add_option("--chunks", chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  schedule_cmd->add_option("--out,-o", out_path, "output file (default: stdout); a summary is printed when given");
  add_json(schedule_cmd);

  NoiseSpec noise;
  noise.jitter_sigma = 0;
  auto add_noise = [&](CLI::App* c) {
    c->add_option("--noise", noise.jitter_sigma, "also evaluate under timing noise: per-op jitter sigma (e.g. 0.05)")
        ->check(CLI::Range(0.0, 2.0));
    c->add_option("--profile-error", noise.profile_sigma, "with --noise: per-stage and per-link error sigma, once per sample")
        ->check(CLI::Range(0.0, 2.0));
    c->add_option("--samples", noise.samples, "with --noise: samples (default 200)")->check(CLI::Range(1, 1000000));
    c->add_option("--seed", noise.seed, "with --noise: random seed")->check(kNoMinus);
  };
  // Noise is asked for by any of its options.
  auto noise_asked = [&](CLI::App* c) -> std::optional<NoiseSpec> {
    if (c->count("--noise") + c->count("--profile-error") + c->count("--samples") + c->count("--seed") == 0) return std::nullopt;
    return noise;
  };

  CLI::App* simulate_cmd = app.add_subcommand("simulate", "simulate a schedule: times, bubbles, memory (nominal and under any timing)");
  add_problem(simulate_cmd);
  simulate_cmd->add_option("--schedule,-s", schedule_path, "schedule JSON")->required();
  add_noise(simulate_cmd);
  add_json(simulate_cmd);

  CLI::App* compare_cmd = app.add_subcommand("compare", "run every family on one problem and compare");
  add_problem(compare_cmd);
  add_noise(compare_cmd);
  add_json(compare_cmd);

  std::string format = "json";
  CLI::App* export_cmd = app.add_subcommand("export", "write a schedule as optpipe JSON, Chrome trace, PyTorch CSV or SVG");
  add_problem(export_cmd);
  export_cmd->add_option("--schedule,-s", schedule_path, "schedule JSON");
  export_cmd->add_option("--family,-f", family, "or: the schedule of this family");
  export_cmd->add_option("--chunks", chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  export_cmd->add_option("--format", format, "json | trace (chrome://tracing, Perfetto) | csv (torch.distributed.pipelining) | svg")
      ->check(CLI::IsMember({"json", "trace", "csv", "svg"}));
  export_cmd->add_option("--out,-o", out_path, "output file (default: stdout)");

  OptimizeOptions opt;
  bool quiet = false;
  std::string timing = "any";
  auto add_timing = [&](CLI::App* c) {
    c->add_option("--timing", timing,
                  "any: the schedule fits under any timing (gated; the default); exact: only at the profile's timings")
        ->check(CLI::IsMember({"any", "exact"}));
  };
  auto add_optimizer_options = [&](CLI::App* c) {
    add_timing(c);
    c->add_option("--robust", opt.robust_sigma,
                  "prefer the schedule whose makespan degrades least: score by the p90 makespan under per-op jitter of "
                  "this sigma (e.g. 0.1)")
        ->check(CLI::Range(0.0, 2.0));
    c->add_option("--robust-samples", opt.robust_samples, "with --robust: samples per candidate (default 8)")
        ->check(CLI::Range(1, 1000));
    c->add_option("--time-limit", opt.time_limit_s, "optimizer seconds (the best so far is returned)")->check(CLI::Range(0.01, 1e6));
    c->add_option("--seed", opt.seed, "random seed")->check(kNoMinus);
    c->add_option("--threads", opt.threads, "parallel searches")->check(CLI::Range(1, 256));
    c->add_flag("--quiet,-q", quiet, "no progress on stderr");
    c->add_flag("--exact", opt.exact, "then the exact models (CP on Gecode, MILP on CBC; small problems): a better schedule or a tighter bound");
    c->add_option("--max-evaluations", opt.max_evaluations,
                  "search budget in candidates, for repeatable runs (0: search until the time limit)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  };
  std::vector<std::string> chart_families = {"1f1b"};
  CLI::App* report_cmd = app.add_subcommand("report", "write an HTML page: comparison table and charts");
  add_problem(report_cmd);
  report_cmd->add_option("--chart", chart_families, "also chart these families (default: 1f1b)");
  report_cmd->add_option("--out,-o", out_path, "output file (default: stdout)");
  report_cmd->add_option("--time-limit", opt.time_limit_s, "optimizer seconds")->check(CLI::Range(0.01, 1e6));
  report_cmd->add_option("--seed", opt.seed, "random seed")->check(kNoMinus);
  add_timing(report_cmd);

  CLI::App* optimize_cmd = app.add_subcommand("optimize", "the fastest schedule that fits the budget, with a lower bound");
  add_problem(optimize_cmd);
  add_optimizer_options(optimize_cmd);
  optimize_cmd->add_option("--out,-o", out_path, "write the schedule JSON here");
  add_json(optimize_cmd);

  PlanArgs plan;
  CLI::App* plan_cmd = app.add_subcommand("plan", "model + cluster + budget: every family and the optimizer, one table, the best schedule");
  plan_cmd->add_option("--model", plan.model, "model preset (llama2-7b, llama2-13b, llama2-70b, gpt-7b, gpt-14b, gpt-tiny)");
  plan_cmd->add_option("--cluster", plan.cluster, "<count>x<gpu>: gpu one of a100-40gb, a100-80gb, h100, h200");
  plan_cmd->add_option("--budget", plan.budget, "memory per GPU, e.g. 60GiB (default: 90% of its HBM)");
  plan_cmd->add_option("--microbatches", plan.microbatches, "per iteration (default: 4 × GPUs)")->check(CLI::Range(1, 100000));
  plan_cmd->add_option("--microbatch-size", plan.microbatch_size, "sequences per microbatch")->check(CLI::Range(1, 4096));
  plan_cmd->add_option("--partition", plan.partition, "layers over stages")->check(CLI::IsMember({"balanced", "uniform"}));
  plan_cmd->add_option("--gpus-per-host-link", plan.gpus_per_host_link, "GPUs sharing one host link")->check(CLI::Range(1, 4096));
  plan_cmd->add_option("--profile", plan.profile_path, "measured profile JSON overriding the formulas");
  plan_cmd->add_flag("--no-flash-attention", plan.no_flash_attention,
                     "keep attention scores for backward (no selective recompute): 5as²b more bytes a layer");
  add_optimizer_options(plan_cmd);
  plan_cmd->add_option("--out,-o", plan.out_path, "where to write the best schedule");
  plan_cmd->add_option("--report", plan.report_path, "also write an HTML report here");
  plan_cmd->add_option("--problem-out", plan.problem_out_path, "also write the problem built from the model (for simulate, optimize, ...)");
  add_json(plan_cmd);

  return parse_and_run(app, argc, argv, "optpipe", [&] {
    opt.any_timing = timing == "any";
    if (*families_cmd) return cmd_families(as_json);
    if (*problem_cmd) {
      Status st = emit(out_path, problem_to_json(default_problem()));
      return st.ok() ? kExitOk : fail(st);
    }
    if (*schedule_cmd) return cmd_schedule(problem_path, family, chunks, out_path, as_json);
    if (*simulate_cmd) return cmd_simulate(problem_path, schedule_path, noise_asked(simulate_cmd), as_json);
    if (*compare_cmd) return cmd_compare(problem_path, noise_asked(compare_cmd), as_json);
    if (*export_cmd) return cmd_export(problem_path, schedule_path, family, chunks, format, out_path);
    if (*report_cmd) return cmd_report(problem_path, chart_families, opt, out_path);
    if (*optimize_cmd) return cmd_optimize(problem_path, opt, quiet, as_json, out_path);
    if (*plan_cmd) return cmd_plan(plan, opt, quiet, as_json);
    return kExitUsage;
  });
}
