// passes.h — transformations of a schedule: each takes a problem and a schedule and returns a
// changed schedule (order, offloads, recomputes, gates), never touching the problem. The families
// and the optimizer compose them; the simulator scores what they return.
//
//   Schedule s = add_offloads(problem, one_f_one_b);            // PipeOffload's rule
//   SimResult sim = simulate(problem, s);
//   Schedule safe = gate_for_any_timing(problem, s, sim.timeline).schedule;
#pragma once

#include <chrono>
#include <cstdint>

#include "optpipe/noise.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/simulate.h"

namespace optpipe {

// The PipeOffload pass, for any schedule: offloads every kept activation whose lifespan in the
// schedule's own simulation covers the round trip with a reload time to spare (queued behind
// earlier offloads on its channel), reloading it reload_lead reload times before its backward
// (PipeOffload: 2; more absorbs a busy host-to-device channel, fewer activations qualify).
// With fraction < 1, only that fraction of each stage's microbatches is considered, evenly spread
// (PipeOffload's offload ratio).
Schedule add_offloads(const Problem& p, const Schedule& base, double reload_lead = 2, double fraction = 1);

// Gating (docs/timing.md): the schedule's allocations held, by WAITs and reload gates, so that no
// device passes max(budget, nominal peak) under any timing that respects its orders.
struct [[nodiscard]] Gated {
  Schedule schedule;
  int waits_added = 0;         // WAIT ops inserted before allocations
  int reload_gates_added = 0;  // anchors moved later plus `after` ops added to reloads
};

// `nominal` is simulate(p, s) with op times. Devices that fit under any timing already are left
// as they are. Until `prune_until`, each reload gate is then taken back where the device stays
// within its budget (or nominal peak) without it, at one worst-case pass per gate: fewer gates,
// for schedules that are kept (the optimizer's answer).
Gated gate_for_any_timing(const Problem& p, const Schedule& s, const Timeline& nominal,
                          std::chrono::steady_clock::time_point prune_until = {});

// Offloads or recomputes activations alive at overflowing peaks (with every_overflow: at every
// overflow) until the schedule fits, or nothing alive there is left to move, or max_rounds
// simulations are spent, or the deadline passes. Returns the changed schedule. Only the changes
// the rules allow: no offload without rules.offload, no recompute without rules.recompute, and
// with whole_stage_recompute a recompute covers every microbatch of its stage.
Schedule repair_memory(const Problem& p, const Schedule& start, int max_rounds, bool every_overflow = false,
                       std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
                       const ScheduleRules& rules = {});

// Simulates `s`; where a device still overflows at a reload, holds that reload until the offload
// in flight then is done, else the compute op running then, else anchors it one compute op later;
// at an F or R, waits first for an offload in flight then. At most `max_rounds` simulations; true
// when `s` then fits every budget, and then it is gated to fit under any timing (as above).
bool settle_transfers(const Problem& p, int max_rounds, Schedule* s);

// For budgets that bind hard: offloads every activation with an op between its forward and its
// backward (reloaded reload_lead_ops compute ops ahead), runs the schedule under the runtime's
// rule (an allocation waits until frees make room: SimOptions::gate_memory), and gates it so that
// every timing is bounded by that run. Infeasible when that run gets stuck or its gates fail to
// bound it; otherwise the schedule fits under any timing.
Result<Schedule> hold_to_budget(const Problem& p, const Schedule& base, int reload_lead_ops = 2);

// Takes out the recomputes, then the offloads, that the schedule does not need: each, the last
// first, if without it the schedule overflows no more and ends no later (by `objective`). The search's plateau
// walk leaves such ones behind; they cost compute and link time that the simulator's makespan
// does not show. At most `max_evaluations` simulations, and none after `deadline`.
struct [[nodiscard]] Tidied {
  Schedule schedule;
  int recomputes_dropped = 0, offloads_dropped = 0;
};
// With whole_stage_recompute, recomputes are left as they are (one alone cannot go).
Tidied drop_needless(const Problem& p, const Schedule& s, int64_t max_evaluations,
                     std::chrono::steady_clock::time_point deadline, const NoiseSamples* noise = nullptr,
                     const ScheduleRules& rules = {}, Objective objective = Objective::kMakespan);

}  // namespace optpipe
