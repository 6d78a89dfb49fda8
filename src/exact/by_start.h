// Turning an exact model's start times back into a schedule, and holding a schedule's transfers
// until it fits — for the exact models' schedules and the heuristic starts alike (private to the
// optimizer).
#pragma once

#include <functional>
#include <vector>

#include "optpipe/schedule.h"

namespace optpipe {

// Each device's ops in the order of their start times. Ops may start together when durations
// are zero (on a solver's grid): then forwards go by ascending stage, backwards by descending
// stage, F before R before B before W, microbatches in order — the order their dependencies need.
Schedule schedule_by_start(const Problem& p, const std::vector<Op>& ops, const std::function<double(const Op&)>& start);

// One activation a model sends to the host: when its offload starts and ends, when its reload
// starts.
struct TransferTimes {
  int stage = 0, microbatch = 0;
  double offload_start = 0, offload_end = 0, reload_start = 0;
};

// Adds the transfers to `s` (compute lists already in start order; the model's times from `start`
// and `end`, in any one unit): offloads and reloads in start order; each reload anchored to the
// latest compute op started by then and before its B, and held `after` whichever ended last by
// then, that op or an offload, if later than the anchor's start; a WAIT for each offload before
// the first F or R that started after it ended. Then every allocation the model placed after a
// free also follows it in the simulator, but for the frees a reload's one `after` cannot cover.
void add_transfers_by_start(const Problem& p, const std::function<double(const Op&)>& start,
                            const std::function<double(const Op&)>& end, std::vector<TransferTimes> transfers,
                            Schedule* s);

}  // namespace optpipe
