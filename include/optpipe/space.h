// space.h — the placements a plan may take: every placement and chunk count the rules allow and
// the model's items can fill, derived once from the problem and the rules. The starts, the frugal
// schedules, the bounds, the partition and the families' grid all range over this one list, so
// that they can never disagree on what was searched.
//
//   for (const PlacementCandidate& c : placement_space(problem, rules))
//     use(c.problem);  // the problem re-cut for c.placement with c.chunks_per_device chunks
#pragma once

#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"

namespace optpipe {

struct PlacementCandidate {
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;
  Problem problem;  // the input re-cut for this placement (rechunk)
};

// Linear (v = 1), V-shape (v = 2), interleaved at every v ≥ 2 and waves at every v ≥ 3 (a wave of
// two is the V-shape, and stands in for it only where the rules allow waves and not the V-shape),
// up to max_chunks_per_device, each the rules allow and rechunk accepts. In that order, v
// ascending within each placement. On one device, linear alone where the rules allow it. Empty
// when nothing applies.
std::vector<PlacementCandidate> placement_space(const Problem& p, const ScheduleRules& rules);

// The most chunks per device the space holds for p: with layers, its items over its devices (a
// chunk holds an item at least); without, its stages' costs are split evenly (rechunk), into as
// many pieces as the least stage has layers (a measured stage split finer would be a guess), and
// 2 at least (the V-shape and two interleaved chunks, as before there was a space); at most 64.
int max_chunks_per_device(const Problem& p);

// The chunk counts of the space's interleaved placements, which the families that take any count
// run at (run_families); {2}, the families' own, when the space has none (the rules then rule
// them out).
std::vector<int> interleaved_chunk_counts(const std::vector<PlacementCandidate>& space);

// "interleaved v3": a placement and its chunks per device, as tables and names show them.
std::string placement_label(Placement placement, int chunks_per_device);

}  // namespace optpipe
