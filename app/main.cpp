// optpipe — command-line front end. Exit codes: 0 ok, 1 bad input, 2 usage, 3 infeasible.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "optpipe/families.h"
#include "optpipe/json_io.h"
#include "optpipe/problem.h"
#include "optpipe/simulate.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"
#include "report.h"

using namespace optpipe;
using json = nlohmann::json;

namespace {

constexpr int kExitOk = 0, kExitBadInput = 1, kExitUsage = 2, kExitInfeasible = 3;

// The one place a status becomes an exit code.
int exit_code(const Status& s) {
  switch (s.code) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidInput: return kExitBadInput;
    case StatusCode::kInfeasible: return kExitInfeasible;
  }
  return kExitBadInput;
}

int fail(const Status& s) {
  std::fprintf(stderr, "optpipe: %s\n", s.message.c_str());
  return exit_code(s);
}

Result<Problem> load_problem(const std::string& path) {
  if (path.empty()) return Result<Problem>::Of(default_problem());
  Result<std::string> text = read_text_file(path);
  if (!text.ok()) return Result<Problem>::Error(text.status);
  Result<Problem> p = problem_from_json(text.value);
  if (!p.ok()) p.status.message = path + ": " + p.status.message;
  return p;
}

// Writes to the file, or to stdout when the path is empty or "-".
Status emit(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  return write_text_file(path, text);
}

void print_json(const json& j) { std::printf("%s\n", j.dump(2).c_str()); }

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
    rows.push_back({f.name, std::string(placement_name(f.placement)) + " v" + std::to_string(f.chunks_per_device),
                    f.description});
  std::fputs(aligned_table(rows).c_str(), stdout);
  return kExitOk;
}

int cmd_schedule(const std::string& problem_path, const std::string& family, int chunks, const std::string& out_path,
                 bool as_json) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  const Family* f = find_family(family);
  if (!f) return fail(Status::Invalid("unknown family \"" + family + "\" (see: optpipe families)"));
  Result<FamilySchedule> fs = build_family(*f, p.value, chunks);
  if (!fs.ok()) return fail(fs.status);
  Validation v = validate(fs.value.problem, fs.value.schedule, {.check_memory_budget = false});
  OPTPIPE_CHECK(v.ok(), "family " + family + " produced an invalid schedule: " + v.summary());
  const Timeline& t = v.sim.timeline;
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

int cmd_simulate(const std::string& problem_path, const std::string& schedule_path, bool as_json) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  Result<std::string> text = read_text_file(schedule_path);
  if (!text.ok()) return fail(text.status);
  Result<Schedule> s = schedule_from_json(text.value);
  if (!s.ok()) return fail(Status::Invalid(schedule_path + ": " + s.status.message));
  // A schedule made for another placement of the same model: re-cut the problem to match.
  Problem problem = p.value;
  if (s.value.placement != problem.placement || s.value.chunks_per_device != problem.chunks_per_device) {
    Result<Problem> re = rechunk(problem, s.value.placement, s.value.chunks_per_device);
    if (!re.ok()) return fail(re.status);
    problem = std::move(re.value);
  }
  Validation v = validate(problem, s.value, {.check_memory_budget = false});
  if (!v.ok()) return fail(Status::Invalid(schedule_path + " is not a valid schedule for this problem:\n" + v.summary()));
  const Timeline& t = v.sim.timeline;
  const bool fits = fits_budget(problem, t);
  if (as_json) {
    json j = timeline_json(problem, t);
    j["problem"] = problem_summary_json(problem);
    print_json(j);
  } else {
    std::printf("problem: %s\n%s", problem_summary(problem).c_str(), timeline_text(problem, t).c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

int cmd_compare(const std::string& problem_path, bool as_json) {
  Result<Problem> p = load_problem(problem_path);
  if (!p.ok()) return fail(p.status);
  json rows_json = json::array();
  std::vector<std::vector<std::string>> rows = {
      {"family", "placement", "makespan", "bubble", "peak memory", "fits", "peak per device"}};
  int num_fit = 0;
  for (const Family& f : families()) {
    Result<FamilySchedule> fs = build_family(f, p.value);
    const std::string where = std::string(placement_name(f.placement)) + " v" + std::to_string(f.chunks_per_device);
    if (!fs.ok()) {
      rows.push_back({f.name, where, "-", "-", "-", "n/a", fs.status.message});
      rows_json.push_back({{"family", f.name}, {"status", "not applicable"}, {"reason", fs.status.message}});
      continue;
    }
    const Problem& fp = fs.value.problem;
    Validation v = validate(fp, fs.value.schedule, {.check_memory_budget = false});
    OPTPIPE_CHECK(v.ok(), std::string("family ") + f.name + " produced an invalid schedule: " + v.summary());
    const Timeline& t = v.sim.timeline;
    const bool fits = fits_budget(fp, t);
    num_fit += fits;
    int64_t peak = 0;
    std::string per_device;
    for (const DeviceFigures& d : t.devices) {
      peak = std::max(peak, d.peak_bytes);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.1f", per_device.empty() ? "" : " ", d.peak_bytes / double(1ll << 30));
      per_device += buf;
    }
    char bubble[32];
    std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * t.bubble_ratio);
    rows.push_back({f.name, where, format_us(t.makespan_us), bubble, format_bytes(peak), fits ? "yes" : "no",
                    per_device + " GiB"});
    json j = timeline_json(fp, t);
    j["family"] = f.name;
    j["status"] = "ok";
    j["placement"] = placement_name(fp.placement);
    j["chunks_per_device"] = fp.chunks_per_device;
    rows_json.push_back(j);
  }
  if (as_json) {
    print_json({{"problem", problem_summary_json(p.value)}, {"families", rows_json}, {"num_fit", num_fit}});
  } else {
    std::printf("problem: %s\n\n%s", problem_summary(p.value).c_str(), aligned_table(rows).c_str());
  }
  return num_fit > 0 ? kExitOk : kExitInfeasible;
}

}  // namespace

int main(int argc, char** argv) {
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

  CLI::App* simulate_cmd = app.add_subcommand("simulate", "simulate a schedule: times, bubbles, memory");
  add_problem(simulate_cmd);
  simulate_cmd->add_option("--schedule,-s", schedule_path, "schedule JSON")->required();
  add_json(simulate_cmd);

  CLI::App* compare_cmd = app.add_subcommand("compare", "run every family on one problem and compare");
  add_problem(compare_cmd);
  add_json(compare_cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  try {
    if (*families_cmd) return cmd_families(as_json);
    if (*problem_cmd) {
      Status st = emit(out_path, problem_to_json(default_problem()));
      return st.ok() ? kExitOk : fail(st);
    }
    if (*schedule_cmd) return cmd_schedule(problem_path, family, chunks, out_path, as_json);
    if (*simulate_cmd) return cmd_simulate(problem_path, schedule_path, as_json);
    if (*compare_cmd) return cmd_compare(problem_path, as_json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optpipe: internal error: %s\n", e.what());
    return 70;
  }
  return kExitUsage;
}
