// schedule_rules.h — what a schedule may contain, as the runtime that will run it imposes: its
// placements and chunks, whether it may offload, whether it may recompute, and whether recompute
// is decided per microbatch or per stage (Megatron's and torch's activation checkpointing wrap a
// stage's module for every microbatch). The optimizer honours them in every part of its search.
//
//   ScheduleRules rules;
//   rules.placements = {Placement::kLinear};
//   rules.offload = false;
//   Status st = check_rules(rules, problem, schedule);  // names the first op that breaks them
#pragma once

#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct ScheduleRules {
  std::vector<Placement> placements;  // empty: any placement
  std::vector<int> chunk_counts;      // chunks per device allowed; empty: any the layers allow
  bool offload = true;
  bool recompute = true;
  bool whole_stage_recompute = false;  // with recompute: a stage recomputes every microbatch or none
  // The layer partition as the problem has it (its cut, and the rule rechunk re-cuts by): the
  // optimizer then moves no layer between stages. False: the partition is searched too.
  bool fixed_partition = false;

  bool allows_placement(Placement placement, int chunks_per_device) const;
  bool any() const;  // some rule restricts the search
  // "placement linear, no offload, whole-stage recompute" (empty when nothing is restricted).
  std::string describe() const;
};

// Ok, or an InvalidInput status naming the first thing in `s` the rules forbid.
Status check_rules(const ScheduleRules& rules, const Problem& p, const Schedule& s);

// Options that cannot hold together: chunks for a placement that has a fixed count (linear 1,
// V-shape 2) and no other placement to take them, whole-stage recompute without recompute.
Status check_rules_options(const ScheduleRules& rules);

}  // namespace optpipe
