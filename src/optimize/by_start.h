// Turning an exact model's start times back into a schedule (private to the optimizer).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "optpipe/schedule.h"

namespace optpipe {

// Each device's ops in the order of their start times. Ops may start together when durations
// are zero (on a solver's grid): then forwards go by ascending stage, backwards by descending
// stage, F before R before B before W, microbatches in order — the order their dependencies need.
inline Schedule schedule_by_start(const Problem& p, const std::vector<Op>& ops, const std::function<double(const Op&)>& start) {
  auto kind_rank = [](OpKind k) { return k == OpKind::kF ? 0 : k == OpKind::kR ? 1 : k == OpKind::kW ? 3 : 2; };
  Schedule s;
  s.placement = p.placement;
  s.chunks_per_device = p.chunks_per_device;
  s.devices.resize(p.num_devices);
  for (const Op& op : ops) s.devices[p.device_of(op.stage)].compute.push_back(op);
  auto tie_key = [](const Op& op) { return op.kind == OpKind::kB || op.kind == OpKind::kBW ? -op.stage : op.stage; };
  for (DeviceSchedule& ds : s.devices)
    std::stable_sort(ds.compute.begin(), ds.compute.end(), [&](const Op& a, const Op& b) {
      const double sa = start(a), sb = start(b);
      if (std::abs(sa - sb) > 1e-6) return sa < sb;
      if (kind_rank(a.kind) != kind_rank(b.kind)) return kind_rank(a.kind) < kind_rank(b.kind);
      if (tie_key(a) != tie_key(b)) return tie_key(a) < tie_key(b);
      return a.microbatch < b.microbatch;
    });
  return s;
}

}  // namespace optpipe
