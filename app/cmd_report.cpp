// optpipe report: an HTML page with the comparison table (every family and the optimized
// schedule) and the charts.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "inputs.h"
#include "optpipe/export.h"
#include "tables.h"

namespace optpipe {

namespace {

struct ReportArgs {
  std::string problem_path, schedule_path, out_path;
  std::vector<std::string> chart_families = {"1f1b"};
  OptimizerArgs optimizer;
};

// A plan file's schedule in the optimizer's place: the page shows the plan, not a new search.
Result<OptimizeResult> planned(const ReportArgs& a) {
  Result<FamilySchedule> fs = load_schedule(a.problem_path, a.schedule_path, "", 0);
  if (!fs.ok()) return Result<OptimizeResult>::Error(fs.status);
  Result<Timeline> t = checked_timeline(fs.value, a.schedule_path, {.op_times = true, .memory_curve = true});
  if (!t.ok()) return Result<OptimizeResult>::Error(t.status);
  OptimizeResult r;
  r.problem = std::move(fs.value.problem);
  r.schedule = std::move(fs.value.schedule);
  r.timeline = std::move(t.value);
  r.outcome = fits_budget(r.problem, r.timeline) ? Outcome::kFeasible : Outcome::kInfeasible;
  return Result<OptimizeResult>::Of(std::move(r));
}

int run_report(const ReportArgs& a) {
  for (const std::string& name : a.chart_families)
    if (!find_family(name)) return fail(Status::Invalid("unknown family \"" + name + "\" (see: optpipe families)"));
  OptimizeResult r;
  std::vector<FamilyRun> runs;
  Problem problem;
  if (!a.schedule_path.empty()) {
    Result<OptimizeResult> plan = planned(a);
    if (!plan.ok()) return fail(plan.status);
    r = std::move(plan.value);
    problem = r.problem;
    runs = run_families(problem, {.op_times = true, .memory_curve = true});
  } else {
    Result<Problem> p = load_problem(a.problem_path);
    if (!p.ok()) return fail(p.status);
    OptimizeOptions options = a.optimizer.parsed();
    options.progress = nullptr;
    if (Status st = a.optimizer.apply_partition(&p.value, &options); !st.ok()) return fail(st);
    runs = families_then_optimize(p.value, {.op_times = true, .memory_curve = true}, options, &r);
    if (!r.status.ok()) return fail(r.status);
    problem = std::move(p.value);
  }
  std::string html = html_report("optpipe report", problem_summary(problem), report_rows(runs, r),
                                 report_charts(r, runs, a.chart_families));
  Status st = emit(a.out_path, html);
  if (!st.ok()) return fail(st);
  if (!a.out_path.empty() && a.out_path != "-") std::fprintf(stderr, "optpipe: wrote %s\n", a.out_path.c_str());
  return r.outcome != Outcome::kInfeasible ? kExitOk : kExitInfeasible;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* c = app.add_subcommand("report", "write an HTML page: comparison table and charts");
  add_problem_option(c, &a->problem_path);
  c->add_option("--schedule,-s", a->schedule_path,
                "a plan file: its schedule in the optimizer's place, beside every family on its problem");
  c->add_option("--chart", a->chart_families, "also chart these families (default: 1f1b)");
  c->add_option("--out,-o", a->out_path, "output file (default: stdout)");
  c->add_option("--time-limit", a->optimizer.options.time_limit_s, "optimizer seconds")->check(CLI::Range(0.01, 1e6));
  c->add_option("--seed", a->optimizer.options.seed, "random seed")->check(kNoMinus);
  a->optimizer.add_timing(c);
  a->optimizer.add_rules(c);
  return {c, [a, c] {
            // With a plan file no search runs: an option of the search is refused, not dropped.
            if (!a->schedule_path.empty())
              for (const CLI::Option* opt : c->get_options())
                if (opt->count() > 0 && opt->get_name() != "--schedule" && opt->get_name() != "--problem" &&
                    opt->get_name() != "--chart" && opt->get_name() != "--out")
                  return usage_error(opt->get_name() + ": report -s shows the plan file's schedule and runs no search");
            return run_report(*a);
          }};
}

}  // namespace optpipe
