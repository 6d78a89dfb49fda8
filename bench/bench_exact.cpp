// The exact models on small random problems under tight budgets: what `--exact` adds to the
// heuristic search (makespan, bound), and the offload-deciding CP model and MILP side by side on
// the linear placement (proofs, agreement, time). With --grid: CP-SAT, Gecode and CBC side by
// side on uniform stages of the built-in problem, D × M × budget × offload.
//   build/bench_exact --trials 8 --microbatches 3
//   build/bench_exact --grid --devices 2,4,8 --grid-microbatches 4,8,16,32 --model-limit 60
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "optpipe/cp.h"
#include "optpipe/cp_sat.h"
#include "optpipe/families.h"
#include "optpipe/milp.h"
#include "optpipe/optimize.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

// Two devices, integer costs, a host link whose transfer takes 20–220 µs after 20–120 µs of
// latency, a budget of 1.5, 2 or 2.5 activations above static memory.
Problem random_problem(std::mt19937& rng, int microbatches) {
  UniformSpec u;
  u.num_devices = 2;
  u.num_microbatches = microbatches;
  u.t_comm_us = rng() % 2 ? 0 : 50;
  Problem p = make_uniform_problem(u);
  for (StageSpec& st : p.stages) {
    st.t_f_us = 100 + rng() % 400;
    st.t_b_us = 100 + rng() % 600;
    st.t_w_us = 50 + rng() % 300;
    st.t_r_us = std::floor(st.t_f_us / 4);
  }
  const double latency_us = 20 + rng() % 100, bandwidth_us = 20 + rng() % 200;
  const double gb_per_s = static_cast<double>(p.stages[0].act_f_bytes) / (bandwidth_us * 1e3);
  p.host_link = {gb_per_s, gb_per_s, latency_us};
  const int64_t halves = 3 + rng() % 3;
  for (DeviceSpec& d : p.devices) d.mem_budget_bytes = d.static_bytes + halves * p.stages[0].act_f_bytes / 2;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Uniform stages of the built-in problem (stage 1: 10 ms passes, 2 GiB activations, 40 GiB
// static), each device on its own host link; budget "a" unbounded, "b" 1F1B's peak, "c" half way
// from that to the least a stage needs (static + one activation).
Problem grid_problem(int devices, int microbatches, char budget) {
  Problem p = default_problem();
  p.stages.assign(devices, p.stages[1]);
  p.devices.resize(devices, p.devices[0]);
  p.num_devices = devices;
  p.num_microbatches = microbatches;
  for (int d = 0; d < devices; d++) {
    p.devices[d].host_link = d;
    p.devices[d].mem_budget_bytes = int64_t{1} << 50;
  }
  if (budget == 'a') return p;
  const Result<Schedule> one_f_one_b = make_1f1b(p);
  const SimResult sim = simulate(p, one_f_one_b.value);
  for (int d = 0; d < devices; d++) {
    const int64_t peak = sim.timeline.devices[d].peak_bytes,
                  least = p.devices[d].static_bytes + p.stages[d].act_f_bytes;
    p.devices[d].mem_budget_bytes = budget == 'b' ? peak : (peak + least) / 2;
  }
  return p;
}

// One row per instance: optpipe's makespan bound under the instance's choices (offload as the
// column says, no recompute, as the models decide), then each engine's simulated makespan,
// whether it is proven optimal (by the engine, or by meeting that bound), the gap to the larger of
// the two bounds, and its time.
int run_grid(const std::vector<int>& devices, const std::vector<int>& microbatches, double limit_s, int workers,
             bool cp_sat_only) {
  fmt::print(
      "{:>2} {:>3} {:>1} {:>3} {:>7} | {:>9} {:>3} {:>6} {:>7} | {:>9} {:>3} {:>6} {:>7} | {:>9} {:>3} {:>6} {:>7}\n",
      "D", "M", "b", "off", "bound", "CP-SAT", "opt", "gap", "time", "Gecode", "opt", "gap", "time", "CBC", "opt",
      "gap", "time");
  int invalid = 0;
  for (int D : devices)
    for (int M : microbatches)
      for (char budget : {'a', 'b', 'c'})
        for (bool offload : {false, true}) {
          const Problem p = grid_problem(D, M, budget);
          ScheduleRules choices;
          choices.offload = offload;
          choices.recompute = false;
          const double bound_us = makespan_lower_bound(p, choices);
          struct Row {
            bool ok = false, proven = false;
            double objective_us = 0, bound_us = 0, s = 0;
          };
          auto cell = [optpipe_bound_us = bound_us](const Row& r) {
            if (!r.ok) return fmt::format("{:>9} {:>3} {:>6} {:>6.1f}s", "-", "-", "-", r.s);
            const double best_bound_us = std::max(r.bound_us, optpipe_bound_us);
            const double gap = r.objective_us > 0 ? std::max(0.0, 1 - best_bound_us / r.objective_us) : 0;
            const bool proven = r.proven || r.objective_us <= best_bound_us * (1 + 1e-9);
            return fmt::format("{:>9.1f} {:>3} {:>5.1f}% {:>6.1f}s", r.objective_us / 1000, proven ? "yes" : "no",
                               100 * gap, r.s);
          };
          auto fits = [&](const Schedule& s) { return validate(p, s).ok(); };
          Row sat, gecode, cbc;
          auto t0 = std::chrono::steady_clock::now();
          CpSatSolution a = solve_cp_sat(
              p, {.offload = offload, .time_limit_s = limit_s, .workers = workers, .makespan_at_least_us = bound_us});
          sat = {a.status.ok(), a.proven_optimal, a.objective_us, a.bound_us, seconds_since(t0)};
          invalid += a.status.ok() && !fits(a.schedule);
          if (cp_sat_only) {
            fmt::print("{:>2} {:>3} {:>1} {:>3} {:>7.1f} | {}\n", D, M, budget, offload ? "yes" : "no", bound_us / 1000,
                       cell(sat));
            std::fflush(stdout);
            continue;
          }
          t0 = std::chrono::steady_clock::now();
          CpSolution g = solve_cp(p, {.memory = true, .time_limit_s = limit_s, .offload = offload});
          gecode = {g.status.ok(), g.proven_optimal, g.objective_us, g.bound_us, seconds_since(t0)};
          invalid += g.status.ok() && !fits(g.schedule);
          t0 = std::chrono::steady_clock::now();
          const MilpOptions mo{.memory = true, .time_limit_s = limit_s, .offload = offload};
          Result<MilpModel> model = build_milp(p, mo);
          if (model.ok()) {
            MilpSolution m = solve_milp(p, model.value, mo, nullptr);
            cbc = {m.status.ok(), m.proven_optimal, m.objective_us, m.bound_us, seconds_since(t0)};
            invalid += m.status.ok() && !fits(m.schedule);
          }
          fmt::print("{:>2} {:>3} {:>1} {:>3} {:>7.1f} | {} | {} | {}\n", D, M, budget, offload ? "yes" : "no",
                     bound_us / 1000, cell(sat), cell(gecode), cell(cbc));
          std::fflush(stdout);
        }
  fmt::print("schedules that do not fit: {}\n", invalid);
  return invalid > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The exact models on small random problems under tight budgets"};
  int trials = 8, microbatches = 3;
  unsigned seed = 5;
  double time_limit_s = 8, model_limit_s = 20;
  app.add_option("--trials", trials, "random problems")->check(CLI::Range(1, 1000));
  app.add_option("--microbatches", microbatches, "microbatches per problem")->check(CLI::Range(1, 8));
  app.add_option("--seed", seed, "random seed");
  app.add_option("--time-limit", time_limit_s, "optimize's limit with --exact (the search alone gets half)")
      ->check(CLI::PositiveNumber);
  app.add_option("--model-limit", model_limit_s, "each direct CP / MILP solve's limit")->check(CLI::PositiveNumber);
  bool grid = false;
  std::vector<int> grid_devices{2, 4, 8}, grid_microbatches{4, 8, 16, 32};
  int workers = 0;
  app.add_flag("--grid", grid, "CP-SAT, Gecode and CBC side by side on the grid of uniform instances");
  app.add_option("--devices", grid_devices, "with --grid: device counts")->delimiter(',');
  app.add_option("--grid-microbatches", grid_microbatches, "with --grid: microbatch counts")->delimiter(',');
  app.add_option("--workers", workers, "with --grid: CP-SAT's workers (0: the cores, at most 8)");
  bool cp_sat_only = false;
  app.add_flag("--cp-sat-only", cp_sat_only, "with --grid: CP-SAT alone");
  CLI11_PARSE(app, argc, argv);
  if (grid) {
    if (Status st = cp_sat_available(); !st.ok()) {
      fmt::print(stderr, "{}\n", st.message);
      return 1;
    }
    return run_grid(grid_devices, grid_microbatches, model_limit_s, workers, cp_sat_only);
  }

  std::mt19937 rng(seed);
  int better = 0, tighter = 0, met = 0, both_proven = 0, agree = 0, cp_proven = 0, milp_proven = 0, invalid = 0;
  std::vector<double> cp_s, milp_s;
  fmt::print("{:>5} {:>3} {:>10} {:>6} {:>10} {:>6} | {:>9} {:>4} {:>7} | {:>9} {:>4} {:>7} {:>5}\n", "trial", "M",
             "search", "gap", "+exact", "gap", "CP", "opt", "time", "MILP", "opt", "time", "fits");
  for (int trial = 0; trial < trials; trial++) {
    const Problem p = random_problem(rng, microbatches);
    const OptimizeResult search = optimize(p, {.time_limit_s = time_limit_s / 2, .max_evaluations = 20000});
    const OptimizeResult exact = optimize(p, {.time_limit_s = time_limit_s, .max_evaluations = 20000, .exact = true});
    if (!search.status.ok() || !exact.status.ok()) {
      fmt::print(stderr, "trial {}: {}\n", trial, search.status.ok() ? exact.status.message : search.status.message);
      return 1;
    }
    better += exact.timeline.makespan_us < search.timeline.makespan_us - 1e-6;
    tighter += exact.lower_bound_us > search.lower_bound_us + 1e-6;
    met += search.gap < 1e-9;

    auto t0 = std::chrono::steady_clock::now();
    const CpSolution cp =
        solve_cp(p, {.memory = true, .time_limit_s = model_limit_s, .recompute = true, .offload = true});
    cp_s.push_back(seconds_since(t0));
    const MilpOptions options{.memory = true, .time_limit_s = model_limit_s, .recompute = true, .offload = true};
    t0 = std::chrono::steady_clock::now();
    Result<MilpModel> model = build_milp(p, options);
    MilpSolution milp;
    if (model.ok())
      milp = solve_milp(p, model.value, options, nullptr);
    else
      milp.status = model.status;
    milp_s.push_back(seconds_since(t0));
    // Every schedule reported is validated and simulated (the budget included).
    bool fits = true;
    if (cp.status.ok()) fits = validate(p, cp.schedule).ok();
    if (milp.status.ok()) fits = fits && validate(p, milp.schedule).ok();
    invalid += !fits;
    cp_proven += cp.proven_optimal;
    milp_proven += milp.proven_optimal;
    if (cp.proven_optimal && milp.proven_optimal) {
      both_proven++;
      // The MILP runs R just before its B; the CP model anywhere between F and B: never slower.
      agree += cp.objective_us <= milp.objective_us + 1e-4;
    }
    auto ms = [](double us) { return fmt::format("{:.3f}", us / 1000); };
    fmt::print("{:>5} {:>3} {:>10} {:>5.1f}% {:>10} {:>5.1f}% | {:>9} {:>4} {:>6.2f}s | {:>9} {:>4} {:>6.2f}s {:>5}\n",
               trial, microbatches, ms(search.timeline.makespan_us), 100 * search.gap, ms(exact.timeline.makespan_us),
               100 * exact.gap, cp.status.ok() ? ms(cp.objective_us) : "-", cp.proven_optimal ? "yes" : "no",
               cp_s.back(), milp.status.ok() ? ms(milp.objective_us) : "-", milp.proven_optimal ? "yes" : "no",
               milp_s.back(), fits ? "yes" : "NO");
  }
  fmt::print(
      "{} problems (2 devices, {} microbatches). --exact: faster schedule on {}, tighter bound on {}; "
      "the search alone met its bound on {}\n",
      trials, microbatches, better, tighter, met);
  fmt::print(
      "linear placement, offload + recompute decided: CP proven on {}, MILP on {}; both proven on {}, CP ≤ MILP on "
      "{} of them; median solve CP {:.2f} s, MILP {:.2f} s; schedules that do not fit: {}\n",
      cp_proven, milp_proven, both_proven, agree, median(cp_s), median(milp_s), invalid);
  return invalid > 0 ? 1 : 0;
}
