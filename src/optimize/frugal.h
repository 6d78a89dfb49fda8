// The frugal schedules (private to the optimizer): built by construction, not found by search,
// so that a budget they fit is a budget optpipe always answers.
//
// One microbatch in flight: microbatch i runs every forward, stage 0 to S−1, then every fused
// backward, S−1 to 0, before microbatch i+1 starts. A device then holds the activations of one
// microbatch's chunks only; of those, all but the chunk it runs last are offloaded right after
// their forward (a WAIT before the next forward on the device, a reload issued once the backward
// before theirs has ended), or recomputed, or kept. Every gate is in the schedule itself, so its
// worst case under any timing is its nominal peak: at most static + one chunk's activation (plus
// workspace, and with recompute the held inputs).
#pragma once

#include <string>
#include <vector>

#include "optpipe/families.h"
#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/space.h"

namespace optpipe {

struct Frugal {
  std::string name;  // "frugal vshape v2 offloaded"
  FamilySchedule built;
  std::vector<int64_t> need_bytes;  // per device: its peak under any timing
  double makespan_us = 0;
};

// Every variant the rules allow (kept, offloaded, recomputed) on every placement of the space
// searched (placement_space), validated.
std::vector<Frugal> frugal_schedules(const std::vector<PlacementCandidate>& space, const ScheduleRules& rules);

// The variant closest to fitting: the least max over devices of need − budget; null if none.
const Frugal* leanest(const std::vector<Frugal>& frugal, const Problem& p);

}  // namespace optpipe
