// Feasibility coverage: for every suite instance and a ladder of budgets from the proven minimum
// to 1F1B's peak, does `optimize` (its default limit) return a schedule that fits, and how fast is
// it against the frugal schedule (one microbatch in flight) that guarantees an answer? With
// --explicit, wherever the default says nothing fits, each placement and chunk count of the space
// is also run alone (--placement P --chunks v, the same limit): a fit there is a wrong "nothing
// fits", counted (it must be zero).
//
//   ./build/bench_coverage --suite bench/suite.json --time-limit 10 --csv coverage.csv
//   ./build/bench_coverage --time-limit 2 --explicit --shares 0 0.02 0.05 0.1 0.25
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "optpipe/families.h"
#include "optpipe/files.h"
#include "optpipe/optimize.h"
#include "optpipe/space.h"
#include "optpipe/units.h"
#include "suite_instances.h"

using namespace optpipe;
using json = nlohmann::json;

int main(int argc, char** argv) {
  CLI::App app{"optpipe feasibility coverage: the optimizer on a ladder of budgets per suite instance"};
  std::string suite_path = "bench/suite.json", csv_path, only;
  std::vector<double> shares = {0, 0.05, 0.1, 0.25, 0.5, 0.75, 1};
  OptimizeOptions options;
  app.add_option("--suite", suite_path, "suite file");
  app.add_option("--time-limit", options.time_limit_s, "seconds per run")->check(CLI::Range(0.01, 1e6));
  app.add_option("--shares", shares, "rungs: the share of the way from the proven minimum to 1F1B's peak")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--only", only, "run only the instance of this name");
  app.add_option("--csv", csv_path, "write one row per run as CSV");
  bool explicit_placements = false;
  app.add_flag("--explicit", explicit_placements,
               "where nothing fits, each placement and chunk count alone too: count the wrong \"nothing fits\"");
  CLI11_PARSE(app, argc, argv);

  Result<std::string> text = read_text_file(suite_path);
  if (!text.ok()) {
    std::fprintf(stderr, "bench_coverage: %s\n", text.status.message.c_str());
    return 1;
  }
  const json suite = json::parse(text.value);
  std::string csv =
      "instance,share,budget_max_bytes,minimum_max_bytes,frugal_max_bytes,outcome,makespan_us,"
      "frugal_makespan_us,speedup_vs_frugal,frugal_fits\n";
  int runs = 0, fitted = 0, frugal_fits = 0, fitted_where_frugal_fits = 0, fitted_below_frugal = 0;
  int wrong_infeasible = 0, explicit_runs = 0;
  std::vector<double> speedups;
  std::printf("%-32s %5s %10s %10s %10s %-10s %10s %10s %8s\n", "instance", "share", "budget", "minimum", "frugal",
              "outcome", "makespan", "frugal", "speed-up");
  for (const json& spec : suite.at("instances")) {
    const std::string name = spec.at("name");
    if (!only.empty() && name != only) continue;
    Result<Problem> base = spec.contains("model") ? from_preset(spec) : synthetic(spec);
    if (!base.ok()) {
      std::fprintf(stderr, "bench_coverage: %s: %s\n", name.c_str(), base.status.message.c_str());
      return 1;
    }
    const std::vector<int64_t> top = family_peak_bytes(base.value, "1f1b");
    // The proven minimum over the placements searched, from the optimizer itself (it is computed
    // before any search, so a short run gives it).
    OptimizeOptions probe = options;
    probe.time_limit_s = 0.01;
    const OptimizeResult probed = optimize(base.value, probe);
    // Under one budget for every device, none below the uniform minimum fits (a 1/D share of the
    // model's static bytes on one device at least).
    std::vector<int64_t> minimum = probed.budget_lower_bound_bytes;
    for (int64_t& m : minimum) m = std::max(m, probed.uniform_budget_lower_bound_bytes);
    for (double share : shares) {
      Problem p = base.value;
      for (int d = 0; d < p.num_devices; d++)
        p.devices[d].mem_budget_bytes =
            minimum[d] + static_cast<int64_t>(share * static_cast<double>(std::max<int64_t>(0, top[d] - minimum[d])));
      OptimizeResult r = optimize(p, options);
      if (r.status.code == StatusCode::kInfeasible) {  // static memory alone passes a budget
        std::printf("%-32s %5.2f refused: %s\n", name.c_str(), share, r.status.message.c_str());
        runs++;
        continue;
      }
      if (!r.status.ok()) {
        std::fprintf(stderr, "bench_coverage: %s: %s\n", name.c_str(), r.status.message.c_str());
        return 1;
      }
      bool frugal_fit = true;
      for (int d = 0; d < p.num_devices; d++)
        frugal_fit = frugal_fit && r.frugal_budget_bytes[d] <= p.devices[d].mem_budget_bytes;
      const bool fits = r.outcome != Outcome::kInfeasible;
      const double speedup = fits && frugal_fit ? r.frugal_makespan_us / r.timeline.makespan_us : 0;
      runs++;
      fitted += fits;
      frugal_fits += frugal_fit;
      fitted_where_frugal_fits += fits && frugal_fit;
      fitted_below_frugal += fits && !frugal_fit;
      if (speedup > 0) speedups.push_back(speedup);
      auto max_of = [](const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); };
      int64_t budget_max = 0;
      for (const DeviceSpec& d : p.devices) budget_max = std::max(budget_max, d.mem_budget_bytes);
      std::printf("%-32s %5.2f %10s %10s %10s %-10s %10s %10s %8s\n", name.c_str(), share,
                  format_bytes(budget_max).c_str(), format_bytes(max_of(minimum)).c_str(),
                  format_bytes(max_of(r.frugal_budget_bytes)).c_str(), outcome_name(r.outcome),
                  fits ? format_us(r.timeline.makespan_us).c_str() : "-", format_us(r.frugal_makespan_us).c_str(),
                  speedup > 0 ? fmt::format("{:.2f}x", speedup).c_str() : "-");
      if (!fits && explicit_placements)
        for (const PlacementCandidate& c : placement_space(p, options.rules)) {
          OptimizeOptions alone = options;
          alone.rules.placements = {c.placement};
          alone.rules.chunk_counts = {c.chunks_per_device};
          const OptimizeResult e = optimize(p, alone);
          explicit_runs++;
          if (!e.status.ok() || e.outcome == Outcome::kInfeasible) continue;
          wrong_infeasible++;
          std::printf("  WRONG: %s fits alone, %s\n", placement_label(c.placement, c.chunks_per_device).c_str(),
                      format_us(e.timeline.makespan_us).c_str());
          break;
        }
      std::fflush(stdout);
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", name, share, budget_max, max_of(minimum),
                         max_of(r.frugal_budget_bytes), outcome_name(r.outcome), fits ? r.timeline.makespan_us : 0,
                         r.frugal_makespan_us, speedup, frugal_fit ? 1 : 0);
    }
  }
  std::sort(speedups.begin(), speedups.end());
  std::printf(
      "\nruns %d: a fitting answer in %d (%.1f%%); the frugal schedule fits %d of them, answered %d of those; "
      "answered below the frugal need %d; speed-up against the frugal schedule where both fit: median %.2fx, "
      "min %.2fx\n",
      runs, fitted, runs ? 100.0 * fitted / runs : 0.0, frugal_fits, fitted_where_frugal_fits, fitted_below_frugal,
      speedups.empty() ? 0 : speedups[speedups.size() / 2], speedups.empty() ? 0 : speedups.front());
  if (explicit_placements)
    std::printf(
        "explicit placements run where nothing fit: %d; wrong \"nothing fits\" (some placement fits alone): %d\n",
        explicit_runs, wrong_infeasible);
  if (!csv_path.empty()) {
    Status st = write_text_file(csv_path, csv);
    if (!st.ok()) {
      std::fprintf(stderr, "bench_coverage: %s\n", st.message.c_str());
      return 1;
    }
  }
  return fitted_where_frugal_fits == frugal_fits && wrong_infeasible == 0 ? 0 : 70;
}
