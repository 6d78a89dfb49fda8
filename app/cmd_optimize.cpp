// optpipe optimize: the fastest schedule that fits the budget, with a lower bound.
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/results_json.h"
#include "optpipe/units.h"
#include "tables.h"

namespace optpipe {

namespace {

struct OptimizeArgs {
  std::string problem_path, out_path;
  OptimizerArgs optimizer;
  bool as_json = false;
};

void print_optimized(const Problem& input, const OptimizeOptions& options, const OptimizeResult& r) {
  const OptimizeStats& st = r.stats;
  const Timeline& t = r.timeline;
  const bool has_best = !st.best_family.label.empty();
  const double idle_reduction = st.best_family.idle_us > 0 ? 1 - t.idle_us / st.best_family.idle_us : 0;
  std::printf("problem: %s\n", problem_summary(input).c_str());
  if (options.rules.any()) std::printf("rules: %s\n", options.rules.describe().c_str());
  const bool span = options.objective == Objective::kSpan;
  if (span) std::printf("objective: the longest per-device span\n");
  if (has_best) {
    std::printf("best family that fits: %s, %s%s", st.best_family.label.c_str(),
                format_us(st.best_family.objective_us).c_str(), span ? " span" : "");
    if (st.best_published_family.label != st.best_family.label)
      std::printf(
          " (as published: %s)",
          st.best_published_family.label.empty()
              ? "none fits"
              : (st.best_published_family.label + ", " + format_us(st.best_published_family.objective_us)).c_str());
    std::printf("\n");
  } else
    std::printf("no family fits the budget\n");
  if (r.outcome != Outcome::kInfeasible) {
    std::printf("optimized (%s v%d, from %s): %s, bubble %.1f%%, idle time %.1f%% lower than the best family\n",
                placement_name(r.problem.placement), r.problem.chunks_per_device, st.start_family.c_str(),
                format_us(t.makespan_us).c_str(), 100 * t.bubble_ratio, 100 * idle_reduction);
    if (span) std::printf("longest span %s\n", format_us(t.max_span_us).c_str());
    std::printf("lower bound %s%s, gap %.1f%%: %s\n", format_us(r.lower_bound_us).c_str(), span ? " (span)" : "",
                100 * r.gap, outcome_name(r.outcome));
    std::printf("%s", gap_detail_lines(r).c_str());
    std::printf("%s\n", timing_line(options, r).c_str());
    if (const std::string line = partition_line(r); !line.empty()) std::printf("%s\n", line.c_str());
  } else {
    std::printf("%s", infeasible_text(options, r).c_str());
  }
  if (st.exact_solves > 0)
    std::printf("exact models (%s): %d solve(s), %lld nodes; %d neighbourhood(s) improved the search's answer\n",
                st.exact_models, st.exact_solves, static_cast<long long>(st.exact_nodes), st.lns_improvements);
  std::printf(
      "search: %lld candidates in %.2f s, %lld improvements, %d needless recompute(s) and %d offload(s) "
      "taken out, seed %llu, %d thread(s)%s\n\n",
      static_cast<long long>(st.evaluations), st.wall_s, static_cast<long long>(st.improvements), st.recomputes_dropped,
      st.offloads_dropped, static_cast<unsigned long long>(options.seed), options.threads,
      st.stopped_by_time    ? "; stopped by the time limit, so another run may differ"
      : st.exact_solves > 0 ? "; the exact models ran for the time left, so another run may differ"
                            : "");
  std::printf("%s", timeline_text(r.problem, t).c_str());
}

int run_optimize(const OptimizeArgs& a) {
  Result<Problem> p = load_problem(a.problem_path);
  if (!p.ok()) return fail(p.status);
  OptimizeOptions options = a.optimizer.parsed();
  if (Status st = a.optimizer.apply_partition(&p.value, &options); !st.ok()) return fail(st);
  OptimizeResult r = optimize(p.value, options);
  if (!r.status.ok()) return fail(r.status);
  const bool fits = r.outcome != Outcome::kInfeasible;
  const bool write = fits && !a.out_path.empty();
  if (write)
    if (Status st = write_text_file(a.out_path, plan_file_text(r.problem, r.schedule)); !st.ok()) return fail(st);
  if (a.as_json) {
    nlohmann::json j = optimize_json(r, options);
    if (write) j["schedule_file"] = a.out_path;
    print_json(j);
  } else {
    print_optimized(p.value, options, r);
    if (write) std::printf("\nwrote %s\n", a.out_path.c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

}  // namespace

Command add_optimize_command(CLI::App& app) {
  auto a = std::make_shared<OptimizeArgs>();
  CLI::App* c = app.add_subcommand("optimize", "the fastest schedule that fits the budget, with a lower bound");
  add_problem_option(c, &a->problem_path);
  a->optimizer.add_to(c);
  c->add_option("--out,-o", a->out_path, "write the schedule JSON here");
  add_json_flag(c, &a->as_json);
  return {c, [a] { return run_optimize(*a); }};
}

}  // namespace optpipe
