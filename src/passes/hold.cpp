// Holding a schedule to its budget: every activation that can go to the host does, the schedule
// runs under the runtime's rule (an allocation waits until frees make room), and that run's own
// order of events becomes the schedule's gates.
#include "optpipe/any_timing.h"
#include "optpipe/passes.h"

namespace optpipe {

Result<Schedule> hold_to_budget(const Problem& p, const Schedule& base, int reload_lead_ops) {
  Schedule s = base;
  for (DeviceSchedule& ds : s.devices)
    for (size_t k = 0; k < ds.compute.size(); k++) {
      const Op f = ds.compute[k];
      if (f.kind != OpKind::kF || p.stages[f.stage].act_f_bytes == 0 ||
          find_op(ds.compute, Op{OpKind::kR, f.stage, f.microbatch}) >= 0 ||
          find_op(ds.offloads, Op{OpKind::kOffload, f.stage, f.microbatch}) >= 0)
        continue;
      const int b = backward_index(ds.compute, f.stage, f.microbatch);
      if (b - static_cast<int>(k) < 2) continue;  // nothing runs in between
      insert_offload(ds, f.stage, f.microbatch, std::max(static_cast<int>(k) + 1, b - reload_lead_ops));
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
