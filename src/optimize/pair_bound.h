// The pair bounds over every partition of a V-shape or of two interleaved chunks (private to the
// optimizer): both stages of each device priced together, the cuts searched device by device at
// a bisected makespan, and the cut that makespan points to (docs/optimizer.md).
#pragma once

#include <chrono>
#include <vector>

#include "optimize/item_sums.h"
#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"

namespace optpipe {

// What a pair bound is asked for beyond its bound: a time after which it stops (its bound then
// the last makespan found impossible, and no cut), and a cut (none when null).
struct PairRequest {
  std::chrono::steady_clock::time_point deadline;
  std::vector<int>* cut;
  const ScheduleRules& rules;
};

// The least makespan in [lo, hi] that some cut of p's items fits on every device, by the device
// terms of both its stages; 0 when p is not such a placement (or hi ≤ lo). Past want.deadline the
// last makespan found impossible. With want.cut, also the cut (empty when none was found).
double vshape_pair_bound(const Problem& p, const ItemSums& sums, double lo, double hi, const PairRequest& want);
double interleaved_pair_bound(const Problem& p, const ItemSums& sums, double lo, double hi, const PairRequest& want);

}  // namespace optpipe
