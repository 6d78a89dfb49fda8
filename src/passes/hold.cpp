// Holding a schedule to its budget: every activation that can go to the host does, the schedule
// runs under the runtime's rule (an allocation waits until frees make room), and that run's own
// order of events becomes the schedule's gates.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "optpipe/any_timing.h"
#include "optpipe/passes.h"

namespace optpipe {

Result<Schedule> hold_to_budget(const Problem& p, const Schedule& base, int reload_lead_ops) {
  Schedule s = base;
  const int M = p.num_microbatches;
  // By stage·M + microbatch: the backward's position in the compute list, and whether the
  // activation is recomputed or offloaded already (one pass per device, not one per activation).
  std::vector<int> back_at(static_cast<size_t>(p.num_stages()) * M);
  std::vector<uint8_t> taken(back_at.size());
  std::vector<OffloadAt> adds;
  for (DeviceSchedule& ds : s.devices) {
    std::fill(back_at.begin(), back_at.end(), -1);
    std::fill(taken.begin(), taken.end(), 0);
    for (size_t k = 0; k < ds.compute.size(); k++) {
      const Op& op = ds.compute[k];
      if (op.kind == OpKind::kB || op.kind == OpKind::kBW) back_at[op.stage * M + op.microbatch] = static_cast<int>(k);
      if (op.kind == OpKind::kR) taken[op.stage * M + op.microbatch] = 1;
    }
    for (const Op& o : ds.offloads) taken[o.stage * M + o.microbatch] = 1;
    adds.clear();
    for (size_t k = 0; k < ds.compute.size(); k++) {
      const Op f = ds.compute[k];
      if (f.kind != OpKind::kF || p.stages[f.stage].act_f_bytes == 0 || taken[f.stage * M + f.microbatch]) continue;
      const int b = back_at[f.stage * M + f.microbatch];
      if (b - static_cast<int>(k) < 2) continue;  // nothing runs in between
      adds.push_back({f.stage, f.microbatch, ds.compute[std::max(static_cast<int>(k) + 1, b - reload_lead_ops)]});
    }
    insert_offloads(ds, adds);
  }
  SimResult held = simulate(p, s, {.op_times = true, .any_timing = false, .gate_memory = true});
  if (!held.ok() || held.out_of_memory)
    return Result<Schedule>::Error(Status::Infeasible("no run of this order fits the budget"));
  // The held run is a run of the schedule within the budget: gates taken from it bound every
  // timing by its peak (gate_for_any_timing's argument holds for any run, not only the nominal).
  Schedule gated = gate_for_any_timing(p, s, held.timeline).schedule;
  SimResult check = simulate(p, gated, {.op_times = false});
  if (!check.ok() || !fits_any_timing(p, check.timeline))
    return Result<Schedule>::Error(Status::Infeasible("the held run's gates do not bound it"));
  return Result<Schedule>::Of(std::move(gated));
}

}  // namespace optpipe
