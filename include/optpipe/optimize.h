// optimize.h — the fastest schedule that fits every device's budget, and how close it is to
// optimal.
//
// The optimizer decides the order of F/B/W (and fused BW) on every device and, for every
// activation, whether to keep it, offload it (and when to reload it) or recompute it. It starts
// from every published family that applies (re-cut to its placement) and from greedy list
// schedules under activation limits, each also repaired to fit the budget by offloading or
// recomputing; the best few are improved by local search, every candidate scored by the
// simulator: first the memory overflow (bytes over budget, summed over devices), then the
// makespan. With `exact`, the CP and MILP models then use the time left. Every schedule returned
// has been validated and simulated.
//
//   OptimizeOptions o;
//   o.time_limit_s = 10;
//   OptimizeResult r = optimize(problem, o);
//   if (r.outcome == Outcome::kInfeasible) ... r.needed_budget_bytes ...
//   else use(r.problem, r.schedule, r.timeline, r.lower_bound_us, r.gap);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/simulate.h"
#include "optpipe/status.h"

namespace optpipe {

struct FamilyRun;  // families.h

// Append new values at the end.
enum class Outcome {
  kOptimal,     // the makespan equals the proven lower bound
  kFeasible,    // fits the budget; the gap to the bound says how far from optimal it may be
  kInfeasible,  // nothing found fits the budget
};
const char* outcome_name(Outcome o);

struct Progress {
  double elapsed_s;
  int64_t evaluations;
  double best_us;  // the objective of the best fitting schedule so far (0: none yet)
  double lower_bound_us;
};

struct OptimizeOptions {
  double time_limit_s = 10;  // wall-clock cap; the best so far is returned when it binds
  // The search's own budget, in simulated candidates. It is what makes runs repeatable: the same
  // seed and threads give the same answer unless the time limit binds first (then
  // Result::stats.stopped_by_time says so). 0: search until the time limit, or until the best
  // schedule meets the lower bound (with `exact`: a budget from the problem's size, so that the
  // exact models get the time left).
  int64_t max_evaluations = 0;
  uint64_t seed = 0;
  int threads = 1;
  std::function<void(const Progress&)> progress;  // called about twice a second, and at the end
  // After the search, spend the time left on the exact models (the CP model on Gecode, the MILP
  // on CBC; small problems only): to improve the schedule in its placement, and to prove a
  // tighter lower bound in every placement searched. They run on the clock, so a run with
  // `exact` may differ from the next.
  bool exact = false;
  // Return a schedule that fits under any timing (any_timing.h): the winner gets the gates that
  // make its worst case its nominal peak, at no cost at nominal timings. False (`--timing
  // exact`): it need only fit at the profile's timings.
  bool any_timing = true;
  // > 0: among the schedules that fit, prefer the one whose makespan degrades least when
  // durations drift: the search scores each candidate by the p90 of its gated makespan over
  // `robust_samples` samples of per-op jitter of this sigma (noise.h; the same samples for every
  // candidate). Each candidate then costs robust_samples + 1 simulations.
  double robust_sigma = 0;
  int robust_samples = 8;
  // What the answer may contain (placements, chunks, offload, recompute): every start, move,
  // repair, exact model and tidy keeps to them. The fastest family for comparison is the fastest
  // the rules allow.
  ScheduleRules rules;
  // What is minimized: the makespan, or the longest per-device span (the steady-state period
  // when iterations overlap). The bound, the gap and the outcome follow it.
  Objective objective = Objective::kMakespan;
  // The families already run on this problem under these rules (families_then_optimize, plan.h,
  // passes its own), so that the optimizer does not build them again; null: it runs them.
  const std::vector<FamilyRun>* families = nullptr;
};

struct OptimizeStats {
  double wall_s = 0;
  int64_t evaluations = 0;   // candidates simulated
  int64_t improvements = 0;  // times the best got better during the search
  bool stopped_by_time = false;
  std::string start_family;       // the family the winning search started from
  double start_objective_us = 0;  // its objective (makespan or span) before the search
  // For comparison (families.h): the fastest family (by the objective) that fits and keeps to
  // the rules, as published or as practitioners tune it, and the fastest as published. An empty
  // label: none fits.
  struct Baseline {
    std::string label;  // "v-half +offload 40%"
    double makespan_us = 0;
    double objective_us = 0;  // its makespan or longest span (OptimizeOptions::objective)
    double idle_us = 0;       // summed over devices
  };
  Baseline best_family, best_published_family;
  std::vector<std::string> placements_searched;  // the whole space ("interleaved v3"), raced or not
  int exact_solves = 0;           // CP, CP-SAT and MILP solves run (--exact, and CP-SAT's neighbourhoods)
  int64_t exact_nodes = 0;        // their branch-and-bound nodes (CP-SAT: branches)
  int lns_improvements = 0;       // CP-SAT neighbourhoods that improved the search's winner
  const char* exact_models = "";  // which ran: "CP-SAT" or "CP on Gecode, MILP on CBC"
  // After the search: recomputes and offloads taken out of the winner because it overflows no
  // more and ends no later without them.
  int recomputes_dropped = 0, offloads_dropped = 0;
  // With OptimizeOptions::any_timing: the gates added to the winner (WAITs; reload anchors and
  // `after` ops).
  int waits_added = 0, reload_gates_added = 0;
  // What those gates cost at nominal timings: 0 but where a gated reload loses a tie on a shared
  // host link that it won ungated.
  double gating_cost_us = 0;
  // With a free partition: items moved between stages from the start's cut.
  int partition_moves = 0;
};

// Infeasible, naming the device, its static bytes and what would help, when some device's static
// memory alone passes its budget: no schedule changes it, so optimize() answers so at once when it
// holds on every placement searched and the partition is fixed (see below when it is free).
Status check_static_memory(const Problem& p);

// Whether static memory alone rules out every schedule the rules allow: with a fixed partition,
// check_static_memory on every placement searched; with a free one (static memory moves with the
// layers), the model's static bytes against the devices' budgets together. optimize() answers
// with it before any search, and plan and report before building the families.
Status static_memory_status(const Problem& p, const ScheduleRules& rules);

// A run's figures as a baseline (an empty one for nullptr).
OptimizeStats::Baseline baseline_of(const FamilyRun* run, Objective objective);

struct [[nodiscard]] OptimizeResult {
  Status status;  // InvalidInput for a bad problem; Infeasible when no family or greedy start
                  // applies to it (every re-cut breaks its limits); otherwise ok, whatever the outcome
  Outcome outcome = Outcome::kInfeasible;
  Problem problem;            // the input re-cut to the schedule's placement
  Schedule schedule;          // the best found (over budget when the outcome is kInfeasible)
  Timeline timeline;          // its simulation, with op times and memory curves
  double lower_bound_us = 0;  // of the objective: no schedule of any placement of the space searched
                              // (placement_space) is better (the least of each placement's bound:
                              // makespan_lower_bound, or with `exact` the CP or MILP proof)
  double gap = 0;             // (objective − bound) / objective
  // The same over the answer's own placement (linear, V-shape, interleaved with its chunks): a
  // gap that is mostly another placement's weaker bound shows here as a smaller placement_gap.
  double placement_lower_bound_us = 0;
  double placement_gap = 0;
  // The same for the answer's own cut of the layers into stages. With the partition searched the
  // placement's bound holds over every cut, so a gap mostly from the cuts the answer did not take
  // shows here as a smaller cut_gap: the schedule is that close to the best order on its cut.
  double cut_lower_bound_us = 0;
  double cut_gap = 0;
  // Per device: the budget the returned schedule needs (its peak; under any timing, its worst
  // case), a proven lower bound on what any schedule of the space searched needs, and what
  // the frugal schedule needs under any timing (one microbatch in flight, every chunk but a
  // device's last offloaded, recomputed or kept: the leanest the rules allow). At or above the
  // frugal figure on every device the outcome is never kInfeasible. Filled in every outcome.
  std::vector<int64_t> needed_budget_bytes;
  std::vector<int64_t> budget_lower_bound_bytes;
  std::vector<int64_t> frugal_budget_bytes;
  // No schedule of the space fits when every device has the same budget below this: besides the
  // per-device bounds, one device holds at least a 1/D share of the model's static bytes.
  int64_t uniform_budget_lower_bound_bytes = 0;
  std::string frugal_label;  // "frugal vshape v2 offloaded"
  // When nothing fits: each rule whose lifting alone makes a frugal schedule fit, so that an
  // answer is certain ("offloading allowed (without --no-offload)"); empty when none does.
  std::vector<std::string> would_help;
  double frugal_makespan_us = 0;
  OptimizeStats stats;
};

OptimizeResult optimize(const Problem& p, const OptimizeOptions& options);

// No schedule of p has a device whose span is shorter than the longest span's bound: each
// device's span holds all its work.
double span_lower_bound(const Problem& p);

// No schedule of p that fits its budget (any order, any offload or recompute) finishes sooner:
// the latest device's earliest possible start plus all its work, plus the idle before its first
// backward that the forwards fitting in memory (and offloads) cannot fill; one microbatch's own
// chain; and the memory-time area its activations need against budget × makespan, with the most
// that offloading and recomputing could save in that time; and the same for whole activations,
// of which the capacity holds a whole number at a time. Offloads and recomputes are assumed only
// where `rules` allow them.
double makespan_lower_bound(const Problem& p, const ScheduleRules& rules = {});

// The part of that bound that holds without a budget: each device's earliest start plus all its
// work, and one microbatch's own chain.
double load_lower_bound(const Problem& p);

// A bound on `objective` that holds for one given schedule of p: for the span, span_lower_bound;
// for the makespan, makespan_lower_bound when that schedule fits the budget, else
// load_lower_bound (a schedule over budget is not bound by what the budget forces).
double lower_bound_for(const Problem& p, bool fits_budget, Objective objective = Objective::kMakespan,
                       const ScheduleRules& rules = {});

// No schedule of p fits device d in less: static memory plus the largest single op's activation
// and workspace on it.
std::vector<int64_t> budget_lower_bound(const Problem& p);

}  // namespace optpipe
