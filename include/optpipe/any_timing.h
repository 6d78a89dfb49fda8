// any_timing.h — memory that fits whatever the durations turn out to be.
//
// Real op and transfer durations drift from the profile. On one device the compute stream's
// allocations and frees always happen in schedule order, but an offload's free and a reload's
// allocation may move against them. A schedule "fits under any timing" when, for every device,
// the peak over every assignment of positive durations that respects the schedule's own orders
// (compute order, FIFO per channel, anchors, WAITs, `after`, data dependencies) stays within the
// budget. An offloaded activation counts as resident until the schedule guarantees its offload
// has finished (a WAIT, or an `after` of an allocation that already happened); a reload counts
// from the earliest moment its anchor and `after` allow.
//
// worst_case_peaks() computes that peak exactly, per device, in O(n log n): it is the heaviest
// set of events closed under "must happen before", and such a set is fixed by how far the compute
// stream, the offload channel and the reload channel have each got.
//
// gate_for_any_timing() adds the gates that make the worst case equal the nominal peak: before
// each allocation, a WAIT for the offloads that had finished by then in the nominal timeline;
// for each reload, an anchor or `after` at the compute event it followed, and an `after` for the
// last offload that had finished before it. Every gate is already satisfied at nominal timings,
// so the nominal timeline does not move.
//
//   Result<std::vector<WorstCase>> w = worst_case_peaks(problem, schedule);
//   Gated g = gate_for_any_timing(problem, schedule, simulate(problem, schedule).timeline);
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/simulate.h"
#include "optpipe/status.h"

namespace optpipe {

// One device's worst moment.
struct [[nodiscard]] WorstCase {
  int64_t peak_bytes = 0;  // static + activations + workspace at the worst moment
  Op during;               // the compute op (not a WAIT) last started then; F0 s0 if none
};

// InvalidInput when the schedule names ops the problem or its own lists do not hold (a reload
// without its offload, a WAIT without it, a forward missing), or its gates contradict its orders.
Result<std::vector<WorstCase>> worst_case_peaks(const Problem& p, const Schedule& s);

}  // namespace optpipe
