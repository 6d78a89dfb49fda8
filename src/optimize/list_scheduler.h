// A greedy list scheduler: builds a schedule by playing time forward. Whenever a device is free
// it runs the first ready op by its rules: a backward (its gradient has arrived), a forward
// (its input has arrived and the activation fits under the device's limit), or a deferred W.
// Forwards and backwards of each stage run in microbatch order; W runs oldest first.
// The optimizer's construction heuristic: run under many activation limits, it yields
// schedules for every memory budget between GPipe's and one activation per device.
#pragma once

#include <cstdint>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct ListRules {
  // Per device: how many stage-microbatch activations may be alive at once (from the start of F
  // to the end of W or BW). Empty: no limit. If every device is blocked by its limit, the
  // earliest forward runs anyway. Counting activations, not bytes, keeps a family's pattern the
  // same whatever its byte sizes.
  std::vector<int> max_live;
  // Per device: the activation bytes a forward may bring it to (F's act_f_bytes counted from its
  // start, B's and W's releases from their ends, as the simulator does). Empty: no limit. Both
  // limits apply when both are given.
  std::vector<double> max_act_bytes;
  bool split_backward = true;     // B now, W later (false: fused BW)
  bool backward_first = true;     // a ready backward goes before a ready forward
  bool later_stage_first = true;  // among ready ops of one kind, the later stage first
  bool w_fills_only = true;       // W only when nothing else is ready (false: W right after its B)
  // A microbatch's first chunk on a device admitted only with room for all its chunks there: on
  // V-shape and interleaved placements a device full of first chunks cannot run the later ones
  // whose backwards would free it.
  bool reserve_later_chunks = false;
};

Result<Schedule> list_schedule(const Problem& p, const ListRules& rules);

}  // namespace optpipe
