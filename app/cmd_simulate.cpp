// optpipe simulate: a schedule's times, bubbles and memory (nominal and under any timing), and
// with --noise its figures under timing noise.
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/results_json.h"
#include "tables.h"

namespace optpipe {

namespace {

struct SimulateArgs {
  std::string problem_path, schedule_path;
  NoiseArgs noise;
  bool as_json = false;
};

int run_simulate(const SimulateArgs& a, const std::optional<NoiseSpec>& noise) {
  Result<FamilySchedule> fs = load_schedule(a.problem_path, a.schedule_path, "", 0);
  if (!fs.ok()) return fail(fs.status);
  const Problem& problem = fs.value.problem;
  Result<Timeline> t = checked_timeline(fs.value, a.schedule_path);
  if (!t.ok()) return fail(t.status);
  const bool fits = fits_budget(problem, t.value);
  Result<NoiseReport> noisy;
  if (noise) {
    noisy = evaluate_noise(problem, fs.value.schedule, *noise);
    if (!noisy.ok()) return fail(noisy.status);
  }
  if (a.as_json) {
    nlohmann::json j = timeline_json(problem, t.value);
    j["problem"] = problem_summary_json(problem);
    if (noise) j["noise"] = noise_json(*noise, noisy.value);
    print_json(j);
  } else {
    std::printf("problem: %s\n%s", problem_summary(problem).c_str(), timeline_text(problem, t.value).c_str());
    if (noise) std::printf("\n%s", noise_text(problem, *noise, noisy.value).c_str());
  }
  return fits ? kExitOk : kExitInfeasible;
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* c =
      app.add_subcommand("simulate", "simulate a schedule: times, bubbles, memory (nominal and under any timing)");
  add_problem_option(c, &a->problem_path);
  c->add_option("--schedule,-s", a->schedule_path, "schedule JSON")->required();
  a->noise.add_to(c);
  add_json_flag(c, &a->as_json);
  return {c, [a, c] { return run_simulate(*a, a->noise.asked(c)); }};
}

}  // namespace optpipe
