// What budgets admit an answer (private to the optimizer): the least budget any schedule of the
// space needs, per device and the same on every device, and which rules stand between a budget
// and an answer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/space.h"

namespace optpipe {

// Per device, the least budget any schedule of the space needs: budget_lower_bound's on each
// placement's cut, the least over them; with the partition free, what every partition needs (a
// device holds an item at least: the least item's static bytes and forward).
std::vector<int64_t> space_budget_lower_bound(const Problem& p, const std::vector<PlacementCandidate>& space,
                                              bool partition_free);

// The least budget, the same on every device, that any schedule of the space fits: the largest of
// the per-device minimums; with the partition free also what the devices need together — one of
// them holds at least a 1/D share of the model's static bytes, and the device holding an item
// holds it whole, each with the activation of a forward of its own at least.
int64_t uniform_budget_lower_bound(const Problem& p, const std::vector<int64_t>& per_device, bool partition_free);

// Whether some frugal schedule on `rules`' space fits p's budget on every device.
bool frugal_fits(const Problem& p, const ScheduleRules& rules);

// The rules lifted one at a time, each named where its frugal schedule then fits (an answer is
// then certain).
std::vector<std::string> what_would_help(const Problem& p, const ScheduleRules& rules);

}  // namespace optpipe
