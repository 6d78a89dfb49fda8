// Holding a schedule's transfers until it fits: reloads issued later or after a free, allocations
// waiting for an offload in flight.
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

bool allocates(OpKind k) { return k == OpKind::kF || k == OpKind::kR; }

}  // namespace

bool settle_transfers(const Problem& p, int max_rounds, Schedule* s) {
  for (int round = 0; round < max_rounds; round++) {
    SimResult sim = simulate(p, *s, {.op_times = true, .any_timing = false});  // nominal peaks only
    if (!sim.ok()) return false;
    int over = -1;
    for (int d = 0; d < p.num_devices && over < 0; d++)
      if (sim.timeline.devices[d].peak_bytes > p.devices[d].mem_budget_bytes) over = d;
    if (over < 0) {
      *s = gate_for_any_timing(p, *s, sim.timeline).schedule;
      return true;
    }
    DeviceSchedule& ds = s->devices[over];
    const DeviceFigures& f = sim.timeline.devices[over];
    const Op at = f.peak_op;
    // The offload that ends first after the peak, among those that need no forward after
    // position `pos` (theirs, or one queued before them on the channel: a deadlock); −1 if none.
    auto offload_in_flight = [&](int pos) {
      int best = -1;
      for (const Op& off : ds.offloads) {
        if (find_op(ds.compute, Op{OpKind::kF, off.stage, off.microbatch}) > pos) break;
        const int i = op_id(p, off);
        if (sim.timeline.end_us[i] <= f.peak_time_us) continue;
        if (best < 0 || sim.timeline.end_us[i] < sim.timeline.end_us[best]) best = i;
      }
      return best;
    };
    // Holds the compute stream at `pos` until offload `id` is done (moving its wait up, never
    // down: the wait already gates what follows it); false if it already waits before `pos`.
    auto wait_at = [&](int id, int pos) {
      const Op wait{OpKind::kWait, op_from_id(p, id).stage, op_from_id(p, id).microbatch};
      const int old = find_op(ds.compute, wait);
      if (old >= 0 && old < pos) return false;
      if (old >= 0) ds.compute.erase(ds.compute.begin() + old);
      ds.compute.insert(ds.compute.begin() + pos, wait);
      return true;
    };
    if (at.kind == OpKind::kReload) {
      ReloadEntry* r = nullptr;
      for (ReloadEntry& e : ds.reloads)
        if (e.reload == at) r = &e;
      OPTPIPE_CHECK(r, "the peak's reload is on its device");
      const int b = backward_index(ds.compute, at.stage, at.microbatch);
      // A free still in flight — an offload, else the compute op running — : issue the reload
      // once it is done; else at the next compute op.
      if (const int off = offload_in_flight(b - 1); off >= 0) {  // never its own: that ended before it started
        r->after.push_back(op_from_id(p, off));
        continue;
      }
      int running = -1;
      for (int k = 0; k < b; k++) {
        const int i = op_id(p, ds.compute[k]);
        if (sim.timeline.start_us[i] <= f.peak_time_us && sim.timeline.end_us[i] > f.peak_time_us) running = k;
      }
      if (running >= 0 && find_op(r->after, ds.compute[running]) < 0) {
        r->after.push_back(ds.compute[running]);
        continue;
      }
      int next = find_op(ds.compute, r->anchor) + 1;
      while (next < b && ds.compute[next].kind == OpKind::kWait) next++;
      if (next >= b) return false;
      r->anchor = ds.compute[next];
      continue;
    }
    if (!allocates(at.kind)) return false;
    const int pos = find_op(ds.compute, at);
    const int off = offload_in_flight(pos);
    if (off < 0 || !wait_at(off, pos)) return false;
  }
  return false;
}

}  // namespace optpipe
