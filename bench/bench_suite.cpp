// The optimizer's benchmark suite: every instance of bench/suite.json solved with a time limit,
// a line per instance as it finishes, a summary, and a results file to compare runs by.
//   build/bench_suite                       # the whole suite, 10 s per instance
//   build/bench_suite --quick               # a few small instances with invariants asserted (CI)
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "optpipe/families.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/results_json.h"
#include "optpipe/units.h"
#include "suite_instances.h"

using namespace optpipe;
using json = nlohmann::json;

namespace {

struct Row {
  std::string name;
  int devices = 0, microbatches = 0;
  std::string budget;
  bool memory_limited = false;  // the fastest family ignoring memory does not fit
  std::string baseline;         // fastest fitting family, as published or tuned ("" if none)
  double baseline_us = 0, baseline_idle_us = 0;
  std::string published;  // fastest fitting family as published ("" if none)
  double published_us = 0, published_idle_us = 0;
  double pipeoffload_us = 0;  // 0 if it does not fit
  std::string outcome;
  double optimized_us = 0, optimized_idle_us = 0, bound_us = 0, gap = 0, placement_gap = 0, cut_gap = 0, wall_s = 0;
  double useful_work_us = 0;  // every F, B and W on every device: what any schedule must run
  int64_t evaluations = 0;
  bool stopped_by_time = false;
  // Under any timing (any_timing.h).
  bool optimized_any_timing = false;
  int families_nominal_only = 0;  // families that fit at the profile's timings but not under any
  std::string safe_family;        // fastest family that fits under any timing ("" if none)
  // p95 makespan under per-op jitter σ = 5% and 10% (0: not measured).
  double optimized_p95_us[2] = {0, 0}, safe_family_p95_us[2] = {0, 0};
};
constexpr double kNoiseSigmas[2] = {0.05, 0.10};

// Idle-time cut vs the fastest fitting family. The simulator's idle time counts a recompute as
// busy; with recompute_idle it counts as idle (work that trains nothing), so only the makespans
// move this one, and a search that drops a needless recompute at the same makespan does not
// lower it.
double idle_cut(const Row& r, bool recompute_idle) {
  if (r.baseline.empty() || r.outcome == "infeasible") return 0;
  const double base = recompute_idle ? r.devices * r.baseline_us - r.useful_work_us : r.baseline_idle_us;
  const double optimized = recompute_idle ? r.devices * r.optimized_us - r.useful_work_us : r.optimized_idle_us;
  return base > 0 ? 1 - optimized / base : 0;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// What the command line asks for.
struct SuiteArgs {
  std::string suite_path = "bench/suite.json", out_path, csv_path, only, problems_dir;
  bool quick = false;
  int noise_samples = 200;
  std::string timing = "any";
  OptimizeOptions options;
};

// One instance: every family and the optimizer, a line printed, the invariants checked (each
// broken one counted in `violations`).
Result<Row> run_instance(const std::string& name, const json& spec, const Problem& problem, const SuiteArgs& a,
                         int* violations) {
  const OptimizeOptions& options = a.options;
  const int noise_samples = a.noise_samples;
  Result<Problem> p = Result<Problem>::Of(problem);
  Row row;
  row.name = name;
  row.devices = p.value.num_devices;
  row.microbatches = p.value.num_microbatches;
  row.budget = spec.at("budget").get<std::string>();
  for (int d = 0; d < p.value.num_devices; d++) row.useful_work_us += p.value.work_us(d);
  const std::vector<FamilyRun> runs = run_families(p.value, {.op_times = false});
  const FamilyRun* best = fastest_fitting(runs);
  const FamilyRun* fastest = nullptr;
  const FamilyRun* safe = nullptr;
  for (const FamilyRun& r : runs) {
    if (!r.status.ok()) continue;
    if (!fastest || r.timeline.makespan_us < fastest->timeline.makespan_us) fastest = &r;
    // PipeOffload as published, at its fastest chunk count
    if (r.family->name == std::string("pipeoffload") && r.tuning == Tuning::kAsPublished && r.fits &&
        (row.pipeoffload_us == 0 || r.timeline.makespan_us < row.pipeoffload_us))
      row.pipeoffload_us = r.timeline.makespan_us;
    row.families_nominal_only += r.fits && !r.fits_any_timing;
    if (r.fits_any_timing && (!safe || r.timeline.makespan_us < safe->timeline.makespan_us)) safe = &r;
  }
  if (safe) row.safe_family = safe->label;
  row.memory_limited = fastest && !fastest->fits;
  if (best) {
    row.baseline = best->label;
    row.baseline_us = best->timeline.makespan_us;
    row.baseline_idle_us = best->timeline.idle_us;
  }
  if (const FamilyRun* published = fastest_fitting(runs, Objective::kMakespan, /*as_published_only=*/true)) {
    row.published = published->label;
    row.published_us = published->timeline.makespan_us;
    row.published_idle_us = published->timeline.idle_us;
  }
  OptimizeResult r = optimize(p.value, options);
  if (!r.status.ok()) return Result<Row>::Error(r.status);
  row.outcome = outcome_name(r.outcome);
  row.optimized_us = r.timeline.makespan_us;
  row.optimized_idle_us = r.timeline.idle_us;
  row.bound_us = r.lower_bound_us;
  row.gap = r.gap;
  row.placement_gap = r.placement_gap;
  row.cut_gap = r.cut_gap;
  row.wall_s = r.stats.wall_s;
  row.evaluations = r.stats.evaluations;
  row.stopped_by_time = r.stats.stopped_by_time;
  const bool fits = r.outcome != Outcome::kInfeasible;
  row.optimized_any_timing = fits_any_timing(r.problem, r.timeline);
  for (int k = 0; k < 2 && noise_samples > 0; k++) {
    // Not the robust objective's own samples (seed + 1): those would flatter it.
    const NoiseSpec spec{.jitter_sigma = kNoiseSigmas[k], .samples = noise_samples, .seed = options.seed + 7919};
    auto p95 = [&](const Problem& prob, const Schedule& s) {
      Result<NoiseReport> n = evaluate_noise(prob, s, spec);
      OPTPIPE_CHECK(n.ok(), n.status.message);
      return n.value.p95_makespan_us;
    };
    if (fits) row.optimized_p95_us[k] = p95(r.problem, r.schedule);
    if (safe) row.safe_family_p95_us[k] = p95(safe->built.problem, safe->built.schedule);
  }
  std::printf("%-30s %4d %5d %-6s %-30s %11s %11s %8.1f%% %6.1f%% %5.1fs %11s\n", name.c_str(), row.devices,
              row.microbatches, row.budget.c_str(), best ? best->label.c_str() : "(none fits)",
              best ? format_us(row.baseline_us).c_str() : "-", fits ? format_us(row.optimized_us).c_str() : "no fit",
              100 * idle_cut(row, false), 100 * row.gap, row.wall_s, row.memory_limited ? "yes" : "no");
  std::fflush(stdout);
  // The invariants every run must keep.
  if (best && !fits) {
    std::printf("  VIOLATION: %s fits but the optimizer returned nothing that fits\n", best->label.c_str());
    (*violations)++;
  }
  if (best && fits && row.optimized_us > row.baseline_us + 1e-6) {
    std::printf("  VIOLATION: optimized %s is slower than %s\n", format_us(row.optimized_us).c_str(),
                best->label.c_str());
    (*violations)++;
  }
  if (fits && options.any_timing && !row.optimized_any_timing) {
    std::printf("  VIOLATION: the optimized schedule does not fit under any timing\n");
    (*violations)++;
  }
  if (row.optimized_p95_us[1] > 0 && row.safe_family_p95_us[1] > 0)
    std::printf("  p95 at σ 5%%/10%%: optimized %s / %s, %s %s / %s\n", format_us(row.optimized_p95_us[0]).c_str(),
                format_us(row.optimized_p95_us[1]).c_str(), row.safe_family.c_str(),
                format_us(row.safe_family_p95_us[0]).c_str(), format_us(row.safe_family_p95_us[1]).c_str());
  return Result<Row>::Of(row);
}

void print_summary(const std::vector<Row>& rows, int noise_samples) {
  int compared = 0, not_worse = 0, only_optimizer_fits = 0;
  std::vector<double> vs_tuned, vs_published, cut_vs_published;
  std::vector<double> cut_limited, cut_rich, work_cut_limited, work_cut_rich, vs_offload, gaps, placement_gaps,
      cut_gaps, walls;
  for (const Row& r : rows) {
    const bool fits = r.outcome != "infeasible";
    walls.push_back(r.wall_s);
    if (fits) {
      gaps.push_back(r.gap);
      placement_gaps.push_back(r.placement_gap);
      cut_gaps.push_back(r.cut_gap);
    }
    if (r.baseline.empty()) {
      only_optimizer_fits += fits;
      continue;
    }
    compared++;
    not_worse += fits && r.optimized_us <= r.baseline_us + 1e-6;
    (r.memory_limited ? cut_limited : cut_rich).push_back(idle_cut(r, false));
    (r.memory_limited ? work_cut_limited : work_cut_rich).push_back(idle_cut(r, true));
    if (r.pipeoffload_us > 0 && fits) vs_offload.push_back(r.pipeoffload_us / r.optimized_us);
    if (fits && r.memory_limited) vs_tuned.push_back(r.baseline_us / r.optimized_us);
    if (fits && r.memory_limited && r.published_us > 0) {
      vs_published.push_back(r.published_us / r.optimized_us);
      cut_vs_published.push_back(r.published_idle_us > 0 ? 1 - r.optimized_idle_us / r.published_idle_us : 0);
    }
  }
  std::printf("\n%zu instances. optimized ≤ fastest fitting family: %d of %d; fits where no family does: %d\n",
              rows.size(), not_worse, compared, only_optimizer_fits);
  std::printf(
      "idle-time cut vs the fastest fitting family: memory-limited mean %.1f%% max %.1f%% (%zu); memory-rich mean "
      "%.1f%% max %.1f%% (%zu)\n",
      100 * mean(cut_limited), 100 * max_of(cut_limited), cut_limited.size(), 100 * mean(cut_rich),
      100 * max_of(cut_rich), cut_rich.size());
  std::printf(
      "  the same, recomputes counted as idle: memory-limited mean %.1f%% max %.1f%%; memory-rich mean %.1f%% max "
      "%.1f%%\n",
      100 * mean(work_cut_limited), 100 * max_of(work_cut_limited), 100 * mean(work_cut_rich),
      100 * max_of(work_cut_rich));
  std::printf(
      "memory-limited speed-up vs the fastest family that fits, as published or tuned: mean %.3fx max %.3fx (%zu); "
      "as published only: mean %.3fx max %.3fx (%zu), idle time cut mean %.1f%%\n",
      mean(vs_tuned), max_of(vs_tuned), vs_tuned.size(), mean(vs_published), max_of(vs_published), vs_published.size(),
      100 * mean(cut_vs_published));
  std::printf("speed-up vs PipeOffload-style (where it fits): mean %.3fx max %.3fx (%zu)\n", mean(vs_offload),
              max_of(vs_offload), vs_offload.size());
  std::printf(
      "gap to the lower bound: mean %.2f%% max %.1f%% (within the answer's own placement: mean %.2f%% max %.1f%%; "
      "its own cut of the layers: mean %.2f%% max %.1f%%); solve time mean %.1f s max %.1f s\n",
      100 * mean(gaps), 100 * max_of(gaps), 100 * mean(placement_gaps), 100 * max_of(placement_gaps),
      100 * mean(cut_gaps), 100 * max_of(cut_gaps), mean(walls), max_of(walls));
  int safe_optimized = 0, fitting = 0, nominal_only_families = 0;
  for (const Row& r : rows) {
    fitting += r.outcome != "infeasible";
    safe_optimized += r.outcome != "infeasible" && r.optimized_any_timing;
    nominal_only_families += r.families_nominal_only;
  }
  std::printf(
      "fits under any timing: optimized %d of %d that fit; families that fit only at the profile's timings: %d\n",
      safe_optimized, fitting, nominal_only_families);
  for (int k = 0; k < 2 && noise_samples > 0; k++) {
    int measured = 0, no_worse = 0, limited = 0, limited_beats = 0;
    std::vector<double> ratios;
    for (const Row& r : rows) {
      if (r.optimized_p95_us[k] <= 0 || r.safe_family_p95_us[k] <= 0) continue;
      const double ratio = r.safe_family_p95_us[k] / r.optimized_p95_us[k];
      measured++;
      ratios.push_back(ratio);
      no_worse += ratio >= 1 / 1.005;
      if (r.memory_limited) {
        limited++;
        limited_beats += ratio > 1;
      }
    }
    std::printf(
        "p95 makespan at σ %.0f%% (%d samples) vs the fastest family that fits under any timing: no worse (within "
        "0.5%%) on %d of %d; better on %d of %d memory-limited; speed-up mean %.3fx min %.3fx\n",
        100 * kNoiseSigmas[k], noise_samples, no_worse, measured, limited_beats, limited, mean(ratios),
        ratios.empty() ? 0 : *std::min_element(ratios.begin(), ratios.end()));
  }
}

void write_results(const std::vector<Row>& rows, const SuiteArgs& a) {
  const OptimizeOptions& options = a.options;
  const std::string &out_path = a.out_path, &csv_path = a.csv_path, &suite_path = a.suite_path, &timing = a.timing;
  const int noise_samples = a.noise_samples;
  const bool quick = a.quick;
  json results = json::array();
  std::string csv =
      "instance,devices,microbatches,budget,memory_limited,best_family,best_family_us,pipeoffload_us,outcome,optimized_"
      "us,idle_cut,lower_bound_us,gap,placement_gap,cut_gap,wall_s,evaluations,stopped_by_time,idle_cut_recompute_idle,"
      "optimized_any_timing,"
      "families_nominal_only,safe_family,optimized_p95_5_us,safe_family_p95_5_us,optimized_p95_10_us,safe_family_p95_"
      "10_us\n";
  for (const Row& r : rows) {
    const double cut = idle_cut(r, false), work_cut = idle_cut(r, true);
    results.push_back({{"instance", r.name},
                       {"devices", r.devices},
                       {"microbatches", r.microbatches},
                       {"budget", r.budget},
                       {"memory_limited", r.memory_limited},
                       {"best_family", r.baseline},
                       {"best_family_us", r.baseline_us},
                       {"best_published_family", r.published},
                       {"best_published_family_us", r.published_us},
                       {"pipeoffload_us", r.pipeoffload_us},
                       {"outcome", r.outcome},
                       {"optimized_us", r.optimized_us},
                       {"idle_cut", cut},
                       {"lower_bound_us", r.bound_us},
                       {"gap", r.gap},
                       {"placement_gap", r.placement_gap},
                       {"cut_gap", r.cut_gap},
                       {"wall_s", r.wall_s},
                       {"evaluations", r.evaluations},
                       {"stopped_by_time", r.stopped_by_time},
                       {"idle_cut_recompute_idle", work_cut},
                       {"optimized_any_timing", r.optimized_any_timing},
                       {"families_nominal_only", r.families_nominal_only},
                       {"safe_family", r.safe_family},
                       {"optimized_p95_us", {r.optimized_p95_us[0], r.optimized_p95_us[1]}},
                       {"safe_family_p95_us", {r.safe_family_p95_us[0], r.safe_family_p95_us[1]}}});
    csv += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{:.4f},{},{:.4f},{:.4f},{:.4f},{:.2f},{},{},{:.4f},{},{},{},{},{},{},{}\n",
        r.name, r.devices, r.microbatches, r.budget, r.memory_limited, r.baseline, r.baseline_us, r.pipeoffload_us,
        r.outcome, r.optimized_us, cut, r.bound_us, r.gap, r.placement_gap, r.cut_gap, r.wall_s, r.evaluations,
        r.stopped_by_time, work_cut, r.optimized_any_timing, r.families_nominal_only, r.safe_family,
        r.optimized_p95_us[0], r.safe_family_p95_us[0], r.optimized_p95_us[1], r.safe_family_p95_us[1]);
  }
  if (!out_path.empty()) {
    json doc = {{"suite", suite_path},
                {"time_limit_s", options.time_limit_s},
                {"threads", options.threads},
                {"timing", timing},
                {"noise_samples", noise_samples},
                {"robust_sigma", options.robust_sigma},
                {"robust_samples", options.robust_samples},
                {"seed", options.seed},
                {"quick", quick},
                {"results", results}};
    if (Status s = write_text_file(out_path, doc.dump(1) + "\n"); !s.ok())
      std::fprintf(stderr, "bench_suite: %s\n", s.message.c_str());
  }
  if (!csv_path.empty())
    if (Status s = write_text_file(csv_path, csv); !s.ok())
      std::fprintf(stderr, "bench_suite: %s\n", s.message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"optpipe benchmark suite: the optimizer against every family"};
  SuiteArgs a;
  OptimizeOptions& options = a.options;
  options.time_limit_s = 10;
  app.add_option("--suite", a.suite_path, "suite file");
  app.add_flag("--quick", a.quick, "the suite's quick instances, a small fixed search budget, invariants asserted");
  app.add_option("--time-limit", options.time_limit_s, "seconds per instance")->check(CLI::Range(0.01, 1e6));
  app.add_option("--threads", options.threads, "parallel searches per instance")->check(CLI::Range(1, 256));
  app.add_option("--seed", options.seed, "random seed")
      ->check(CLI::Validator(
          [](std::string& t) { return t.find('-') == std::string::npos ? "" : "must not be negative"; }, "UINT"));
  app.add_option("--only", a.only, "run only the instance of this name");
  app.add_option("--noise-samples", a.noise_samples, "samples per noisy p95 (σ = 5% and 10%); 0: none")
      ->check(CLI::Range(0, 100000));
  app.add_option("--robust", options.robust_sigma, "optimizer: score by the p90 makespan under this jitter sigma")
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--robust-samples", options.robust_samples, "optimizer: samples per candidate with --robust")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--fixed-partition", a.options.rules.fixed_partition,
               "optimizer: keep each instance's layer partition (the balanced cut) instead of searching it");
  app.add_option("--timing", a.timing, "any (the optimizer's default) or exact")
      ->check(CLI::IsMember({"any", "exact"}));
  app.add_option("--problems-out", a.problems_dir,
                 "also write each instance's problem JSON into this folder (<name>.json)");
  app.add_option("--out", a.out_path, "write the results as JSON");
  app.add_option("--csv", a.csv_path, "write the results as CSV");
  CLI11_PARSE(app, argc, argv);

  Result<std::string> text = read_text_file(a.suite_path);
  if (!text.ok()) {
    std::fprintf(stderr, "bench_suite: %s\n", text.status.message.c_str());
    return 1;
  }
  const json suite = json::parse(text.value);
  if (!a.problems_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.problems_dir, ec);
    if (ec) {
      std::fprintf(stderr, "bench_suite: cannot create %s: %s\n", a.problems_dir.c_str(), ec.message().c_str());
      return 1;
    }
  }
  std::vector<std::string> quick_names = suite.value("quick", std::vector<std::string>{});
  if (a.quick) {
    options.max_evaluations = 3000;
    options.time_limit_s = 120;
    a.noise_samples = std::min(a.noise_samples, 20);
  }
  options.any_timing = a.timing == "any";

  std::vector<Row> rows;
  int violations = 0;
  std::printf("%-30s %4s %5s %-6s %-30s %11s %11s %9s %7s %6s %11s\n", "instance", "D", "M", "budget", "best family",
              "family", "optimized", "idle cut", "gap", "time", "mem-limited");
  for (const json& spec : suite.at("instances")) {
    const std::string name = spec.at("name").get<std::string>();
    if (a.quick && std::find(quick_names.begin(), quick_names.end(), name) == quick_names.end()) continue;
    if (!a.only.empty() && name != a.only) continue;
    Result<Problem> p = spec.contains("model") ? from_preset(spec) : synthetic(spec);
    Status st = p.ok() ? set_budget(spec.at("budget").get<std::string>(), &p.value) : p.status;
    if (!st.ok()) {
      std::fprintf(stderr, "bench_suite: %s: %s\n", name.c_str(), st.message.c_str());
      return 1;
    }
    if (!a.problems_dir.empty()) {
      Status written = write_text_file(a.problems_dir + "/" + name + ".json", problem_to_json(p.value));
      if (!written.ok()) {
        std::fprintf(stderr, "bench_suite: %s\n", written.message.c_str());
        return 1;
      }
    }
    Result<Row> row = run_instance(name, spec, p.value, a, &violations);
    if (!row.ok()) {
      std::fprintf(stderr, "bench_suite: %s: %s\n", name.c_str(), row.status.message.c_str());
      return 1;
    }
    rows.push_back(std::move(row.value));
  }

  print_summary(rows, a.noise_samples);
  if (!a.out_path.empty() || !a.csv_path.empty()) write_results(rows, a);
  if (violations > 0) {
    std::printf("%d invariant violation(s)\n", violations);
    return 1;
  }
  return 0;
}
