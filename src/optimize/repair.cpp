// Memory repair: turns a schedule that overflows its budget into one that fits, by changing the
// fate of activations alive at each overflowing device's peak — enough of them to cover the
// overflow — then simulating again, since the peak moves. An activation is offloaded when its
// transfer out can finish before the peak and its transfer back can start after it (that costs
// no compute), else recomputed; among equals, the one whose backward comes last goes first (it
// is the one kept longest for nothing).
#include <algorithm>

#include "optimize/search.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

struct Candidate {
  Op back;  // the B or BW of the activation
  bool offload;
  double back_start_us;
};

// Fixes device d's peak in s, given the timeline t of s; false if nothing there can move.
bool repair_device(const Problem& p, const Timeline& t, int d, Schedule& s) {
  DeviceSchedule& ds = s.devices[d];
  const double peak = t.devices[d].peak_time_us;
  int64_t over = t.devices[d].peak_bytes - p.devices[d].mem_budget_bytes;
  auto at = [&](const Op& op, bool end) { return (end ? t.end_us : t.start_us)[op_id(p, op)]; };

  // Activations already recomputed or offloaded, by op id of their F.
  std::vector<char> decided(num_op_ids(p), 0);
  for (const Op& op : ds.compute)
    if (op.kind == OpKind::kR) decided[op_id(p, Op{OpKind::kF, op.stage, op.microbatch})] = 1;
  for (const Op& op : ds.offloads) decided[op_id(p, Op{OpKind::kF, op.stage, op.microbatch})] = 1;
  std::vector<Candidate> alive;
  for (const Op& op : ds.compute) {
    if (op.kind != OpKind::kB && op.kind != OpKind::kBW) continue;
    const Op f{OpKind::kF, op.stage, op.microbatch};
    if (!(at(f, true) <= peak && at(op, false) > peak)) continue;
    if (decided[op_id(p, f)]) continue;
    if (p.stages[op.stage].act_f_bytes - p.stages[op.stage].act_input_bytes <= 0) continue;
    const bool offload = at(f, true) + p.offload_us(op.stage) <= peak && peak + p.reload_us(op.stage) <= at(op, false);
    alive.push_back({op, offload, at(op, false)});
  }
  std::stable_sort(alive.begin(), alive.end(), [](const Candidate& a, const Candidate& b) {
    return a.offload != b.offload ? a.offload : a.back_start_us > b.back_start_us;
  });
  if (alive.empty()) return false;

  for (const Candidate& c : alive) {
    if (over <= 0) break;
    const Op& back = c.back;
    const StageSpec& st = p.stages[back.stage];
    if (c.offload) {
      // Reload issued at the first compute op after the peak that still lands it in time.
      const int b = backward_index(ds.compute, back.stage, back.microbatch);
      const double rel_us = p.reload_us(back.stage);
      int anchor = b - 1;
      for (int k = find_op(ds.compute, Op{OpKind::kF, back.stage, back.microbatch}) + 1; k < b; k++)
        if (at(ds.compute[k], false) >= peak && at(ds.compute[k], false) + rel_us <= c.back_start_us) {
          anchor = k;
          break;
        }
      insert_offload(ds, back.stage, back.microbatch, anchor);
      over -= st.act_f_bytes;
    } else {
      ds.compute.insert(ds.compute.begin() + backward_index(ds.compute, back.stage, back.microbatch),
                        Op{OpKind::kR, back.stage, back.microbatch});
      over -= st.act_f_bytes - st.act_input_bytes;
    }
  }
  return true;
}

}  // namespace

Schedule repair_memory(const Problem& p, const Schedule& start, int max_rounds) {
  Schedule s = start;
  for (int round = 0; round < max_rounds; round++) {
    SimResult r = simulate(p, s, {.op_times = true});
    if (!r.ok()) return start;
    bool changed = false, overflows = false;
    for (int d = 0; d < p.num_devices; d++) {
      if (r.timeline.devices[d].peak_bytes <= p.devices[d].mem_budget_bytes) continue;
      overflows = true;
      changed = repair_device(p, r.timeline, d, s) || changed;
    }
    if (!overflows || !changed) return s;
  }
  return s;
}

}  // namespace optpipe
