// optpipe schedule: one family's schedule as JSON, checked and simulated.
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/json_io.h"
#include "optpipe/results_json.h"
#include "tables.h"

namespace optpipe {

namespace {

struct ScheduleArgs {
  std::string problem_path, family, out_path;
  int chunks = 0;
  bool as_json = false;
};

int run_schedule(const ScheduleArgs& a) {
  Result<Problem> p = load_problem(a.problem_path);
  if (!p.ok()) return fail(p.status);
  const Family* f = find_family(a.family);
  if (!f) return fail(Status::Invalid("unknown family \"" + a.family + "\" (see: optpipe families)"));
  Result<FamilySchedule> fs = build_family(*f, p.value, a.chunks);
  if (!fs.ok()) return fail(fs.status);
  Result<Timeline> checked = checked_timeline(fs.value, "family " + a.family);
  OPTPIPE_CHECK(checked.ok(), checked.status.message);
  const Timeline& t = checked.value;
  if (Status st = emit(a.out_path, plan_file_text(fs.value.problem, fs.value.schedule)); !st.ok()) return fail(st);
  if (a.out_path.empty() || a.out_path == "-") return kExitOk;
  if (a.as_json) {
    nlohmann::json j = timeline_json(fs.value.problem, t);
    j["family"] = a.family;
    j["schedule_file"] = a.out_path;
    print_json(j);
  } else {
    std::printf("%s: wrote %s\n%s", a.family.c_str(), a.out_path.c_str(), timeline_text(fs.value.problem, t).c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_schedule_command(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  CLI::App* c = app.add_subcommand("schedule", "write one family's schedule as JSON");
  add_problem_option(c, &a->problem_path);
  c->add_option("--family,-f", a->family, "family name (see: optpipe families)")->required();
  c->add_option("--chunks", a->chunks, "chunks per device, for interleaved families")->check(CLI::Range(1, 64));
  c->add_option("--out,-o", a->out_path, "output file (default: stdout); a summary is printed when given");
  add_json_flag(c, &a->as_json);
  return {c, [a] { return run_schedule(*a); }};
}

}  // namespace optpipe
