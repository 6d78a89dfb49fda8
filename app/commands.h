// commands.h — the command table of `optpipe`: one add_<name>_command per app/cmd_<name>.cpp,
// each adding its subcommand and options and returning how to run it; and what the commands
// share (common options, checked timelines, labels).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "optpipe/export.h"
#include "optpipe/families.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/plan.h"
#include "optpipe/simulate.h"
#include "optpipe/space.h"

namespace optpipe {

// A subcommand and how to run it once parsed: the exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_families_command(CLI::App& app);
Command add_problem_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_optimize_command(CLI::App& app);
Command add_plan_command(CLI::App& app);

// Options several commands take.
void add_problem_option(CLI::App* c, std::string* path);
void add_json_flag(CLI::App* c, bool* as_json);

// --noise, --profile-error, --samples, --seed: noise is asked for by any of them.
struct NoiseArgs {
  NoiseSpec spec{.jitter_sigma = 0};
  void add_to(CLI::App* c);
  std::optional<NoiseSpec> asked(CLI::App* c) const;
};

// The optimizer's options: --timing, and with add_search, --robust ... --max-evaluations.
struct OptimizerArgs {
  OptimizeOptions options;
  std::string timing = "any";
  std::string objective = "makespan";
  std::vector<std::string> placements;
  bool no_offload = false, no_recompute = false;
  bool quiet = false;
  std::string partition = "free";     // free, balanced, even, even-accounted (uniform: even)
  std::vector<int> layers_per_stage;  // transformer layers per stage, pinned
  void add_timing(CLI::App* c);
  // --placement, --chunks, --no-offload, --no-recompute, --whole-stage-recompute, --partition,
  // --layers-per-stage.
  void add_rules(CLI::App* c);
  void add_to(CLI::App* c);
  // The options parsed, with progress on stderr unless --quiet.
  OptimizeOptions parsed() const;
  // p re-cut as --partition or --layers-per-stage say (its placement too, for a count of D·v
  // stages), the partition then fixed in `options`' rules; InvalidInput naming what is wrong.
  Status apply_partition(Problem* p, OptimizeOptions* options) const;
};

// "vshape v2": a placement and its chunks per device, as the tables show them.
std::string placement_label(const Family& f);

// Paths in the output may hold bytes that are not UTF-8: replaced, never thrown on.
void print_json(const nlohmann::json& j);

// Validates (structure, deadlock; not the budget) and simulates.
Result<Timeline> checked_timeline(const FamilySchedule& fs, const std::string& what, const SimOptions& sim = {});

// The HTML report's table rows (every family, then the optimized schedule) and charts (the
// optimized schedule beside the fastest family that fits, then any asked for).
std::vector<ReportRow> report_rows(const std::vector<FamilyRun>& runs, const OptimizeResult& r);
std::vector<ReportChart> report_charts(const OptimizeResult& r, const std::vector<FamilyRun>& runs,
                                       const std::vector<std::string>& chart_families);

// Which memory rule the answer was held to, and what holding it cost.
std::string timing_line(const OptimizeOptions& options, const OptimizeResult& r);
// Why an optimizer run found nothing that fits: what the best schedule found, the frugal schedule
// and any schedule need per device, and what would help.
std::string infeasible_text(const OptimizeOptions& options, const OptimizeResult& r);
// "partition: layers per stage E+5 5 5 … 5+H (3 items moved by the optimizer)", or empty for a
// problem without layers.
std::string partition_line(const OptimizeResult& r);
// Where the gap lies, a line each: "gap within its placement (linear v1): 3.4% to its bound 1.23 s; ..."
// when another placement's weaker bound holds part of it, "gap within its cut of the layers: ..."
// when the bound over the cuts not taken does; "" when the answer's own cut holds the whole gap.
std::string gap_detail_lines(const OptimizeResult& r);

}  // namespace optpipe
