// The `optpipe` Python module: problems, families, simulation and exports from a training script.
// Problems and schedules cross the boundary as dicts (their JSON forms), figures come back as
// dicts, and bad input raises ValueError with optpipe's message.
//
//   import optpipe
//   built = optpipe.schedule("zb-v")                      # {"problem": {...}, "schedule": {...}}
//   figures = optpipe.simulate(built["problem"], built["schedule"])
//   csv, notes = optpipe.export_csv(built["schedule"])
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "optpipe/cost_model.h"
#include "optpipe/export.h"
#include "optpipe/families.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/plan.h"
#include "optpipe/plan_file.h"
#include "optpipe/results_json.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"

namespace py = pybind11;
using namespace optpipe;

namespace {

py::object to_dict(const std::string& json_text) { return py::module_::import("json").attr("loads")(json_text); }

std::string to_text(const py::object& value) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  return py::module_::import("json").attr("dumps")(value).cast<std::string>();
}

template <class T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) throw py::value_error(r.status.message);
  return std::move(r.value);
}

Problem problem_arg(const py::object& problem) {
  if (problem.is_none()) return default_problem();
  return value_or_raise(problem_from_json(to_text(problem)));
}

// Schedule and problem: a plan file's own problem (a problem given beside it must be the same),
// else the given one (default: the built-in problem), re-cut for the schedule's placement.
std::pair<Problem, Schedule> pair_args(const py::object& problem, const py::object& schedule) {
  PlanFile f = value_or_raise(plan_file_from_json(to_text(schedule)));
  Problem given;
  if (!problem.is_none() || !f.problem) given = problem_arg(problem);
  Problem p = value_or_raise(plan_problem(f, problem.is_none() && f.problem ? nullptr : &given, "problem"));
  return {std::move(p), std::move(f.schedule)};
}

Timeline checked(const Problem& p, const Schedule& s, const SimOptions& sim) {
  Validation v = validate(p, s, {.check_memory_budget = false, .sim = sim});
  if (!v.ok()) throw py::value_error("not a valid schedule for this problem:\n" + v.summary());
  return std::move(v.sim.timeline);
}

// The module's functions by subject, each a list of m.def registrations.
int64_t budget_arg(const py::object& budget) {
  if (budget.is_none()) return 0;
  const std::string text =
      py::isinstance<py::str>(budget) ? budget.cast<std::string>() : std::to_string(budget.cast<int64_t>());
  int64_t bytes = 0;
  if (!parse_bytes(text, &bytes) || bytes <= 0)
    throw py::value_error("budget: expected a size such as \"60GiB\", got \"" + text + "\"");
  return bytes;
}

std::vector<Placement> placements_arg(const std::vector<std::string>& names) {
  std::vector<Placement> out;
  for (const std::string& name : names) {
    Placement placement;
    if (!parse_placement(name, &placement))
      throw py::value_error("placements: \"linear\", \"interleaved\", \"vshape\" or \"wave\", got \"" + name + "\"");
    out.push_back(placement);
  }
  return out;
}

void add_problem_functions(py::module_& m) {
  m.def(
      "families", [] { return to_dict(families_json().dump()); },
      "The schedule families: name, placement, chunks per device, description.");

  m.def(
      "default_problem", [] { return to_dict(problem_to_json(default_problem())); },
      "The built-in problem, as a dict in optpipe.problem/1 form.");

  m.def(
      "preset_problem",
      [](const std::string& model, const std::string& cluster, const py::object& budget, int microbatches) {
        const ModelSpec spec = value_or_raise(find_model(model));
        ClusterSpec c = value_or_raise(find_cluster(cluster));
        PlanSpec plan;
        plan.num_microbatches = microbatches;
        plan.mem_budget_bytes = budget_arg(budget);
        return to_dict(problem_to_json(value_or_raise(build_problem(spec, c, plan))));
      },
      py::arg("model"), py::arg("cluster"), py::arg("budget") = py::none(), py::arg("microbatches") = 0,
      "The problem the cost model builds for a preset model on a cluster, e.g. (\"llama2-13b\", \"8xa100-40gb\", "
      "\"36GiB\").");
}

void add_optimizer_functions(py::module_& m) {
  m.def(
      "compare",
      [](const py::object& problem) {
        py::list out;
        for (const FamilyRun& run : run_families(problem_arg(problem), {.op_times = false})) {
          py::dict row = to_dict(family_run_json(run).dump());
          if (run.status.ok()) {
            row["problem"] = to_dict(problem_to_json(run.built.problem));
            row["schedule"] = to_dict(schedule_to_json(run.built.schedule));
          }
          out.append(row);
        }
        return out;
      },
      py::arg("problem") = py::none(),
      "Every family on the problem, as `compare --json` lists them: each as published, and after each that "
      "overflows its practitioner tunings that fit (label, tuning, recompute_layers or offload_fraction), with "
      "figures, the problem it ran on (a recompute tuning's holds its recompute_layers) and its schedule.");

  m.def(
      "optimize",
      [](const py::object& problem, double time_limit_s, uint64_t seed, int threads, int64_t max_evaluations,
         bool exact, const std::string& timing, double robust, int robust_samples,
         const std::vector<std::string>& placements, const std::vector<int>& chunks, bool offload, bool recompute,
         bool whole_stage_recompute, const std::string& objective) {
        if (timing != "any" && timing != "exact")
          throw py::value_error("timing: \"any\" or \"exact\", got \"" + timing + "\"");
        OptimizeOptions o;
        o.time_limit_s = time_limit_s;
        o.seed = seed;
        o.threads = threads;
        o.max_evaluations = max_evaluations;
        o.exact = exact;
        o.any_timing = timing == "any";
        o.robust_sigma = robust;
        o.robust_samples = robust_samples;
        o.rules.placements = placements_arg(placements);
        o.rules.chunk_counts = chunks;
        o.rules.offload = offload;
        o.rules.recompute = recompute;
        o.rules.whole_stage_recompute = whole_stage_recompute;
        if (!parse_objective(objective, &o.objective))
          throw py::value_error("objective: \"makespan\" or \"span\", got \"" + objective + "\"");
        OptimizeResult r;
        const Problem p = problem_arg(problem);
        {
          py::gil_scoped_release unlocked;  // the search runs its own threads
          r = optimize(p, o);
        }
        if (!r.status.ok()) throw py::value_error(r.status.message);
        py::dict out = to_dict(optimize_json(r, o).dump());
        out["problem"] = to_dict(problem_to_json(r.problem));
        out["schedule"] = to_dict(schedule_to_json(r.schedule));
        return out;
      },
      py::arg("problem") = py::none(), py::arg("time_limit_s") = 10.0, py::arg("seed") = 0, py::arg("threads") = 1,
      py::arg("max_evaluations") = 0, py::arg("exact") = false, py::arg("timing") = "any", py::arg("robust") = 0.0,
      py::arg("robust_samples") = 8, py::arg("placements") = std::vector<std::string>{},
      py::arg("chunks") = std::vector<int>{}, py::arg("offload") = true, py::arg("recompute") = true,
      py::arg("whole_stage_recompute") = false, py::arg("objective") = "makespan",
      "The fastest schedule found that fits (timing=\"any\": under any timing; \"exact\": at the profile's timings): "
      "its figures (as simulate()), outcome, bound, gap, best_family for comparison, rules, stats, problem and "
      "schedule. placements, chunks (a list of counts), offload=False, recompute=False, whole_stage_recompute=True "
      "restrict what it may "
      "contain; objective=\"span\" minimizes the longest per-device span instead of the makespan. "
      "robust=σ prefers the schedule "
      "whose p90 makespan under that jitter is least.");

  m.def(
      "evaluate_noise",
      [](const py::object& problem, const py::object& schedule, double sigma, double profile_error, int samples,
         uint64_t seed) {
        auto [p, s] = pair_args(problem, schedule);
        checked(p, s, {.op_times = false});
        const NoiseSpec spec{.jitter_sigma = sigma, .profile_sigma = profile_error, .samples = samples, .seed = seed};
        NoiseReport r;
        {
          py::gil_scoped_release unlocked;
          r = value_or_raise(evaluate_noise(p, s, spec));
        }
        return to_dict(noise_json(spec, r).dump());
      },
      py::arg("problem"), py::arg("schedule"), py::arg("sigma") = 0.05, py::arg("profile_error") = 0.0,
      py::arg("samples") = 200, py::arg("seed") = 1,
      "Makespan mean/p50/p95 under timing noise, and how many samples overflowed as planned or got stuck gated.");
}

void add_plan_functions(py::module_& m) {
  m.def(
      "plan",
      [](const std::string& model, const std::string& cluster, const py::object& budget, int microbatches,
         int microbatch_size, int tp, int dp, double time_limit_s, uint64_t seed, int64_t max_evaluations,
         const std::vector<std::string>& placements, const std::vector<int>& chunks, int cp,
         const std::string& precision, bool tp_comm_overlap) {
        ModelSpec spec = value_or_raise(find_model(model));
        PlanSpec plan_spec{.num_microbatches = microbatches,
                           .microbatch_size = microbatch_size,
                           .mem_budget_bytes = budget_arg(budget),
                           .tp = tp,
                           .dp = dp,
                           .cp = cp,
                           .precision = value_or_raise(parse_precision(precision)),
                           .tp_comm_overlap = tp_comm_overlap};
        OptimizeOptions o{.time_limit_s = time_limit_s, .max_evaluations = max_evaluations, .seed = seed};
        o.rules.placements = placements_arg(placements);
        o.rules.chunk_counts = chunks;
        Result<PlanReport> r = Result<PlanReport>::Error(Status::Invalid("not run"));
        {
          py::gil_scoped_release unlocked;
          r = plan(spec, cluster, plan_spec, o);
        }
        const PlanReport report = value_or_raise(std::move(r));
        if (!report.result.status.ok()) throw py::value_error(report.result.status.message);
        py::dict out = to_dict(plan_json(report, o).dump());
        if (report.result.outcome != Outcome::kInfeasible)
          out["plan_file"] =
              to_dict(plan_file_to_json({.schedule = report.result.schedule,
                                         .problem = report.result.problem,
                                         .planned_for = report.planned_for,
                                         .command_line = "optpipe.plan(\"" + model + "\", \"" + cluster + "\")"}));
        else
          out["plan_file"] = py::none();
        return out;
      },
      py::arg("model") = "llama2-13b", py::arg("cluster") = "8xa100-40gb", py::arg("budget") = py::none(),
      py::arg("microbatches") = 0, py::arg("microbatch_size") = 1, py::arg("tp") = 1, py::arg("dp") = 1,
      py::arg("time_limit_s") = 10.0, py::arg("seed") = 0, py::arg("max_evaluations") = 0,
      py::arg("placements") = std::vector<std::string>{}, py::arg("chunks") = std::vector<int>{}, py::arg("cp") = 1,
      py::arg("precision") = "bf16", py::arg("tp_comm_overlap") = false,
      "The main job, as `optpipe plan --json` reports it (every family at every chunk count, then the optimizer), "
      "with plan_file: the plan file of the answer (schedule, problem, planned_for), or None when nothing fits.");

  m.def(
      "read_plan",
      [](const std::string& path) {
        const std::string text = value_or_raise(read_text_file(path));
        Result<PlanFile> f = plan_file_from_json(text);
        if (!f.ok()) throw py::value_error(path + ": " + f.status.message);
        return to_dict(plan_file_to_json(f.value));
      },
      py::arg("path"), "A plan file (optpipe.schedule/2, or /1), checked, as a dict.");

  m.def(
      "write_plan",
      [](const std::string& path, const py::object& plan_file) {
        const std::string text = plan_file_to_json(value_or_raise(plan_file_from_json(to_text(plan_file))));
        if (Status st = write_text_file(path, text); !st.ok()) throw py::value_error(st.message);
      },
      py::arg("path"), py::arg("plan_file"), "Writes a plan file (a dict from plan() or read_plan()), checked.");

  m.def(
      "export",
      [](const py::object& plan_file, const std::string& format, const std::string& csv_path) {
        const PlanFile f = value_or_raise(plan_file_from_json(to_text(plan_file)));
        const Problem p = value_or_raise(plan_problem(f, nullptr, "problem"));
        const Schedule& s = f.schedule;
        const PlannedFor* pf = f.planned_for ? &*f.planned_for : nullptr;
        if (format == "megatron") return value_or_raise(megatron_flags(p, s, pf));
        if (format == "torchtitan") return value_or_raise(torchtitan_toml(p, csv_path, pf));
        if (format == "torchtitan-py") return value_or_raise(torchtitan_config(p, csv_path, pf));
        throw py::value_error("format: \"megatron\", \"torchtitan\" or \"torchtitan-py\", got \"" + format + "\"");
      },
      py::arg("plan_file"), py::arg("format"), py::arg("csv_path") = "optpipe_schedule.csv",
      "The plan as Megatron-LM's flags, torchtitan 0.2's TOML or torchtitan 0.3's Python configuration "
      "(docs/exports.md); ValueError naming why a plan cannot be expressed there.");
}

void add_schedule_functions(py::module_& m) {
  m.def(
      "schedule",
      [](const std::string& family, const py::object& problem, int chunks) {
        const Family* f = find_family(family);
        if (!f) throw py::value_error("unknown family \"" + family + "\"");
        FamilySchedule fs = value_or_raise(build_family(*f, problem_arg(problem), chunks));
        checked(fs.problem, fs.schedule, {.op_times = false});
        py::dict out;
        out["problem"] = to_dict(problem_to_json(fs.problem));
        out["schedule"] = to_dict(schedule_to_json(fs.schedule));
        return out;
      },
      py::arg("family"), py::arg("problem") = py::none(), py::arg("chunks") = 0,
      "A family's schedule for the problem (default: the built-in one), with the problem re-cut to its placement.");

  m.def(
      "simulate",
      [](const py::object& problem, const py::object& schedule) {
        auto [p, s] = pair_args(problem, schedule);
        return to_dict(timeline_json(p, checked(p, s, {.op_times = false})).dump());
      },
      py::arg("problem"), py::arg("schedule"),
      "Simulated figures: makespan, bubble, per-device busy/idle and peak memory.");

  m.def(
      "problem_for",
      [](const py::object& problem, const py::object& schedule) {
        return to_dict(problem_to_json(pair_args(problem, schedule).first));
      },
      py::arg("problem"), py::arg("schedule"),
      "The problem as the schedule runs on it: re-cut to its placement and partition.");

  m.def(
      "validate",
      [](const py::object& problem, const py::object& schedule) {
        auto [p, s] = pair_args(problem, schedule);
        std::vector<std::string> issues;
        for (const Issue& i : validate(p, s).issues) issues.push_back(i.message);
        return issues;
      },
      py::arg("problem"), py::arg("schedule"), "The validator's issues (empty: valid and within budget).");
}

void add_export_functions(py::module_& m) {
  m.def(
      "schedule_to_json",
      [](const py::object& schedule) {
        return schedule_to_json(value_or_raise(schedule_from_json(to_text(schedule))));
      },
      py::arg("schedule"), "The schedule in optpipe.schedule/1 JSON text.");

  m.def(
      "export_csv",
      [](const py::object& schedule, bool drop_memory_ops) {
        Result<CsvExport> csv = pytorch_csv(value_or_raise(schedule_from_json(to_text(schedule))), drop_memory_ops);
        if (!csv.ok()) throw py::value_error(csv.status.message + "; pass drop_memory_ops=True to leave them out");
        return py::make_tuple(csv.value.csv, csv.value.notes);
      },
      py::arg("schedule"), py::arg("drop_memory_ops") = false,
      "PyTorch pipelining CSV (compute_only) and notes; a schedule with recomputes or offloads is refused unless "
      "drop_memory_ops=True (then the notes say what was left out).");

  m.def(
      "export_trace",
      [](const py::object& problem, const py::object& schedule) {
        auto [p, s] = pair_args(problem, schedule);
        return chrome_trace_json(p, s, checked(p, s, {.op_times = true, .memory_curve = true}));
      },
      py::arg("problem"), py::arg("schedule"), "Chrome trace JSON text.");

  m.def(
      "export_svg",
      [](const py::object& problem, const py::object& schedule, const std::string& title) {
        auto [p, s] = pair_args(problem, schedule);
        return schedule_svg(p, s, checked(p, s, {.op_times = true, .memory_curve = true}), title);
      },
      py::arg("problem"), py::arg("schedule"), py::arg("title") = "schedule", "Gantt and memory chart, SVG text.");
}

}  // namespace

PYBIND11_MODULE(_optpipe, m) {
  m.doc() = "optpipe: pipeline-parallel schedules under a memory budget";
  add_problem_functions(m);
  m.attr("__version__") = optpipe_version();
  add_optimizer_functions(m);
  add_plan_functions(m);
  add_schedule_functions(m);
  add_export_functions(m);
}
