// Memory repair: turns a schedule that overflows its budget into one that fits, by changing the
// fate of activations alive at each overflowing peak. An activation is offloaded when its
// transfer out can finish before the peak and its transfer back can start after it, else
// recomputed; among those alive, the one whose backward comes last goes first (it is the one
// kept the longest for nothing).
#include <algorithm>

#include "optimize/search.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

int index_of(const std::vector<Op>& ops, const Op& op) {
  for (size_t k = 0; k < ops.size(); k++)
    if (ops[k] == op) return static_cast<int>(k);
  return -1;
}

}  // namespace

Schedule repair_memory(const Problem& p, const Schedule& start, int max_changes) {
  Schedule s = start;
  for (int change = 0; change < max_changes; change++) {
    SimResult r = simulate(p, s, {.op_times = true});
    if (!r.ok()) return start;
    const Timeline& t = r.timeline;
    int worst = -1;
    int64_t worst_over = 0;
    for (int d = 0; d < p.num_devices; d++) {
      const int64_t over = t.devices[d].peak_bytes - p.devices[d].mem_budget_bytes;
      if (over > worst_over) {
        worst_over = over;
        worst = d;
      }
    }
    if (worst < 0) return s;  // fits
    DeviceSchedule& ds = s.devices[worst];
    const double peak = t.devices[worst].peak_time_us;
    auto at = [&](const Op& op, bool end) { return (end ? t.end_us : t.start_us)[op_id(p, op)]; };

    // Activations held at the peak that are neither offloaded nor recomputed yet. Offloading
    // costs no compute, so one that can be offloaded is preferred; among equals, the one whose
    // backward comes last.
    const Op* chosen = nullptr;
    bool chosen_offloads = false;
    double chosen_back = -1;
    for (const Op& op : ds.compute) {
      if (op.kind != OpKind::kB && op.kind != OpKind::kBW) continue;
      const Op f{OpKind::kF, op.stage, op.microbatch};
      if (!(at(f, true) <= peak && at(op, false) > peak)) continue;
      if (index_of(ds.compute, Op{OpKind::kR, op.stage, op.microbatch}) >= 0) continue;
      if (index_of(ds.offloads, Op{OpKind::kOffload, op.stage, op.microbatch}) >= 0) continue;
      if (p.stages[op.stage].act_f_bytes - p.stages[op.stage].act_input_bytes <= 0) continue;
      const bool offloads = at(f, true) + p.offload_us(op.stage) <= peak && peak + p.reload_us(op.stage) <= at(op, false);
      if ((offloads && !chosen_offloads) || (offloads == chosen_offloads && at(op, false) > chosen_back)) {
        chosen_back = at(op, false);
        chosen_offloads = offloads;
        chosen = &op;
      }
    }
    if (!chosen) return s;  // nothing left to move at this peak
    const Op back = *chosen;
    const Op f{OpKind::kF, back.stage, back.microbatch};
    const double rel_us = p.reload_us(back.stage);
    const bool can_offload = chosen_offloads;
    if (can_offload) {
      // Reload issued at the last compute op starting early enough to land before the backward.
      const int b = index_of(ds.compute, back);
      int anchor = -1;
      for (int k = b - 1; k > index_of(ds.compute, f); k--)
        if (at(ds.compute[k], false) + rel_us <= at(back, false) && at(ds.compute[k], false) >= peak) anchor = k;
      if (anchor < 0) anchor = b - 1;
      auto f_pos = [&](const Op& x) { return index_of(ds.compute, Op{OpKind::kF, x.stage, x.microbatch}); };
      auto b_pos = [&](const Op& x) {
        const int i = index_of(ds.compute, Op{OpKind::kB, x.stage, x.microbatch});
        return i >= 0 ? i : index_of(ds.compute, Op{OpKind::kBW, x.stage, x.microbatch});
      };
      size_t o = 0;
      while (o < ds.offloads.size() && f_pos(ds.offloads[o]) < f_pos(f)) o++;
      ds.offloads.insert(ds.offloads.begin() + o, Op{OpKind::kOffload, back.stage, back.microbatch});
      size_t q = 0;
      while (q < ds.reloads.size() && b_pos(ds.reloads[q].reload) < b) q++;
      ds.reloads.insert(ds.reloads.begin() + q, {Op{OpKind::kReload, back.stage, back.microbatch}, ds.compute[anchor]});
    } else {
      ds.compute.insert(ds.compute.begin() + index_of(ds.compute, back), Op{OpKind::kR, back.stage, back.microbatch});
    }
  }
  return s;
}

}  // namespace optpipe
