// The frugal schedules: one microbatch in flight, every chunk but a device's last offloaded,
// recomputed or kept.
#include "optimize/frugal.h"

#include <algorithm>
#include <limits>

#include "optpipe/any_timing.h"
#include "optpipe/validate.h"

namespace optpipe {

namespace {

enum class Keep { kKept, kOffloaded, kRecomputed };

const char* keep_name(Keep k) {
  switch (k) {
    case Keep::kKept: return "kept";
    case Keep::kOffloaded: return "offloaded";
    case Keep::kRecomputed: return "recomputed";
  }
  return "?";
}

Schedule build(const Problem& p, Keep keep) {
  const int S = p.num_stages(), M = p.num_microbatches;
  Schedule s;
  s.placement = p.placement;
  s.chunks_per_device = p.chunks_per_device;
  s.devices.resize(p.num_devices);
  // A device's last chunk (its highest stage) runs its backward right after its forward.
  std::vector<int> last_stage(p.num_devices, -1);
  for (int st = 0; st < S; st++) last_stage[p.device_of(st)] = st;
  for (int i = 0; i < M; i++) {
    for (int st = 0; st < S; st++) {
      DeviceSchedule& ds = s.devices[p.device_of(st)];
      // The offload of the chunk before must have ended before this forward allocates.
      if (keep == Keep::kOffloaded && !ds.offloads.empty() && ds.offloads.back().microbatch == i)
        ds.compute.push_back(Op{OpKind::kWait, ds.offloads.back().stage, i});
      ds.compute.push_back(Op{OpKind::kF, st, i});
      if (keep == Keep::kOffloaded && st != last_stage[p.device_of(st)])
        ds.offloads.push_back(Op{OpKind::kOffload, st, i});
    }
    for (int st = S - 1; st >= 0; st--) {
      DeviceSchedule& ds = s.devices[p.device_of(st)];
      if (st != last_stage[p.device_of(st)]) {
        if (keep == Keep::kRecomputed) ds.compute.push_back(Op{OpKind::kR, st, i});
        // Issued once the backward before it on this device has ended and freed its bytes.
        if (keep == Keep::kOffloaded)
          ds.reloads.push_back({Op{OpKind::kReload, st, i}, ds.compute.back(), {ds.compute.back()}});
      }
      ds.compute.push_back(Op{OpKind::kBW, st, i});
    }
  }
  return s;
}

}  // namespace

std::vector<Frugal> frugal_schedules(const std::vector<PlacementCandidate>& space, const ScheduleRules& rules) {
  std::vector<Frugal> out;
  for (const PlacementCandidate& c : space) {
    for (Keep keep : {Keep::kKept, Keep::kOffloaded, Keep::kRecomputed}) {
      if ((keep == Keep::kOffloaded && !rules.offload) || (keep == Keep::kRecomputed && !rules.recompute)) continue;
      Schedule s = build(c.problem, keep);
      Validation checked = validate(c.problem, s, {.check_memory_budget = false, .sim = {.op_times = false}});
      OPTPIPE_CHECK(checked.ok(), "a frugal schedule must be valid: " + checked.summary());
      Frugal f{"frugal " + placement_label(c.placement, c.chunks_per_device) + " " + keep_name(keep),
               {c.problem, std::move(s)},
               {},
               checked.sim.timeline.makespan_us};
      for (const DeviceFigures& d : checked.sim.timeline.devices) f.need_bytes.push_back(d.worst_peak_bytes);
      out.push_back(std::move(f));
    }
  }
  return out;
}

const Frugal* leanest(const std::vector<Frugal>& frugal, const Problem& p) {
  const Frugal* best = nullptr;
  int64_t best_excess = std::numeric_limits<int64_t>::max();
  for (const Frugal& f : frugal) {
    int64_t excess = std::numeric_limits<int64_t>::min();
    for (int d = 0; d < p.num_devices; d++)
      excess = std::max(excess, f.need_bytes[d] - f.built.problem.devices[d].mem_budget_bytes);
    if (excess < best_excess) best = &f, best_excess = excess;
  }
  return best;
}

}  // namespace optpipe
