// Turning an exact model's start times back into a schedule (private to the optimizer).
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

// Adds the transfers to `s` (compute lists already in start order, times from `start`): offloads
// and reloads in start order, each reload anchored to the latest compute op started by then and
// before its B, and a WAIT for each offload before the first F or R that started after it ended.
// Then every allocation the model placed after a free also follows it in the simulator, except
// where the simulator, starting ops as early as it can, moves a reload ahead of another op.
void add_transfers_by_start(const Problem& p, const std::function<double(const Op&)>& start,
                            std::vector<TransferTimes> transfers, Schedule* s);

// Simulates `s`; where a device still overflows at a reload, anchors that reload one compute op
// later; at an F or R, waits first for an offload still in flight then. At most `max_rounds`
// simulations; true when `s` then fits every budget.
bool settle_transfers(const Problem& p, int max_rounds, Schedule* s);

}  // namespace optpipe
