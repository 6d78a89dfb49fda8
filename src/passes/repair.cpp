// Memory repair: turns a schedule that overflows its budget into one that fits, by changing the
// fate of activations alive at each overflowing device's peak — enough of them to cover the
// overflow — then simulating again, since the peak moves. With `every_overflow`, one round goes
// on along the device's memory curve past the peak's fix, with what the changes free taken off,
// and treats every overflow: far fewer simulations on large schedules, but the freed bytes are
// estimates, so it can change more activations than needed. An activation is offloaded when its
// transfer out can finish before the overflow and its transfer back can start after it (that
// costs no compute); one whose B is done but whose W was left for later has the W run right
// after its B (no compute either); else it is recomputed — an offloaded one too, when it is in
// memory at the overflow all the same (still queued for the link, or back already). Among
// equals, the one whose backward (or W) comes last goes first: it is kept longest for nothing.
#include <algorithm>
#include <queue>

#include "optimize/search.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

// What frees an activation's bytes at an overflow, cheapest first: an offload costs no compute,
// running a deferred W right after its B costs none either (it only moves), a recompute costs t_R.
enum class Fix { kOffload, kPullW, kRecompute };

struct Candidate {
  Op back;  // the B or BW of the activation
  Fix fix;
  double back_start_us;  // with kPullW: the W's start
  bool was_offloaded;    // offloaded, but in memory at the overflow all the same: recompute it instead
};

// Bytes a change frees until `until_us`.
struct Freed {
  double until_us;
  int64_t bytes;
  bool operator>(const Freed& o) const { return until_us > o.until_us; }
};

// One device's repair within one simulation of the schedule: which activations are alive at an
// overflow, and the change that frees each.
class DeviceRepair {
 public:
  DeviceRepair(const Problem& p, const Timeline& t, int d, DeviceSchedule& ds, const ScheduleRules& rules)
      : p_(p), t_(t), ds_(ds), rules_(rules), decided_(num_op_ids(p), 0), offloaded_(num_op_ids(p), 0) {
    for (const Op& op : ds.compute)
      if (op.kind == OpKind::kR) decided_[op_id(p, Op{OpKind::kF, op.stage, op.microbatch})] = 1;
    for (const Op& op : ds.offloads) {
      const int f = op_id(p, Op{OpKind::kF, op.stage, op.microbatch});
      decided_[f] = offloaded_[f] = 1;
    }
    for (const Op& op : ds.compute)
      if (op.kind == OpKind::kB || op.kind == OpKind::kBW) backs_.push_back(op);
  }

  // The activations alive at `peak` that a change can free, cheapest first; among equals the one
  // whose backward comes last.
  std::vector<Candidate> alive_at(double peak) const {
    std::vector<Candidate> alive;
    for (const Op& op : backs_) {
      const Op f{OpKind::kF, op.stage, op.microbatch};
      const Op w{OpKind::kW, op.stage, op.microbatch};
      if (op.kind == OpKind::kB && at(op, true) <= peak && at(w, false) > peak && decided_[op_id(p_, w)] == 0 &&
          p_.stages[op.stage].act_w_bytes < 0) {
        alive.push_back({op, Fix::kPullW, at(w, false), false});
        continue;
      }
      if (!(at(f, true) <= peak && at(op, false) > peak)) continue;
      if (p_.stages[op.stage].act_f_bytes - p_.stages[op.stage].act_input_bytes <= 0) continue;
      if (offloaded_[op_id(p_, f)]) {
        // Still queued for the link, or back already: a recompute frees it, and the link too.
        const bool resident = at(Op{OpKind::kOffload, op.stage, op.microbatch}, true) > peak ||
                              at(Op{OpKind::kReload, op.stage, op.microbatch}, false) <= peak;
        if (resident && decided_[op_id(p_, f)] == 1 && rules_.recompute)
          alive.push_back({op, Fix::kRecompute, at(op, false), true});
        continue;
      }
      if (decided_[op_id(p_, f)]) continue;
      const bool offload = rules_.offload && at(f, true) + p_.offload_us(op.stage) <= peak &&
                           peak + p_.reload_us(op.stage) <= at(op, false);
      if (offload || rules_.recompute)
        alive.push_back({op, offload ? Fix::kOffload : Fix::kRecompute, at(op, false), false});
    }
    std::stable_sort(alive.begin(), alive.end(), [](const Candidate& a, const Candidate& b) {
      return a.fix != b.fix ? a.fix < b.fix : a.back_start_us > b.back_start_us;
    });
    return alive;
  }

  // Makes the change `c` for an overflow at `peak`: the bytes it frees and until when.
  Freed apply(const Candidate& c, double peak) {
    const Op& back = c.back;
    const StageSpec& st = p_.stages[back.stage];
    const Op w{OpKind::kW, back.stage, back.microbatch};
    decided_[op_id(p_, c.fix == Fix::kPullW ? w : Op{OpKind::kF, back.stage, back.microbatch})] = 2;
    if (c.fix == Fix::kPullW) {
      ds_.compute.erase(ds_.compute.begin() + find_op(ds_.compute, w));
      ds_.compute.insert(ds_.compute.begin() + find_op(ds_.compute, back) + 1, w);
      return {c.back_start_us, -st.act_w_bytes};
    }
    if (c.fix == Fix::kOffload) {
      // Reload issued at the first compute op after the overflow that still lands it in time.
      const int b = backward_index(ds_.compute, back.stage, back.microbatch);
      const double rel_us = p_.reload_us(back.stage);
      int anchor = b - 1;
      for (int k = find_op(ds_.compute, Op{OpKind::kF, back.stage, back.microbatch}) + 1; k < b; k++)
        if (at(ds_.compute[k], false) >= peak && at(ds_.compute[k], false) + rel_us <= c.back_start_us) {
          anchor = k;
          break;
        }
      offloads_.push_back({back.stage, back.microbatch, ds_.compute[anchor]});
      double until = at(ds_.compute[anchor], false);  // NaN when the anchor is a recompute added this round
      if (!(until >= 0)) until = c.back_start_us - rel_us;
      return {until, st.act_f_bytes};
    }
    if (c.was_offloaded) remove_offload(ds_, back.stage, back.microbatch);
    // Recomputed already this round with its stage: it frees its activation at the peak all the same.
    if (find_op(ds_.compute, Op{OpKind::kR, back.stage, back.microbatch}) >= 0)
      return {c.back_start_us, st.act_f_bytes - st.act_input_bytes};
    recompute(back.stage, back.microbatch);
    // Whole-stage recompute: every microbatch of the stage (only this one's bytes are counted
    // here; the next simulation sees the rest).
    for (int i = 0; i < p_.num_microbatches && rules_.whole_stage_recompute; i++) {
      if (i == back.microbatch || find_op(ds_.compute, Op{OpKind::kR, back.stage, i}) >= 0) continue;
      remove_offload(ds_, back.stage, i);
      recompute(back.stage, i);
    }
    return {c.back_start_us, st.act_f_bytes - st.act_input_bytes};
  }

  // The offloads chosen, into the device's lists at once (nothing above reads those lists but
  // for the offloads there before this repair).
  void insert_chosen_offloads() { insert_offloads(ds_, offloads_); }

 private:
  double at(const Op& op, bool end) const { return (end ? t_.end_us : t_.start_us)[op_id(p_, op)]; }
  void recompute(int stage, int microbatch) {
    decided_[op_id(p_, Op{OpKind::kF, stage, microbatch})] = 2;
    ds_.compute.insert(ds_.compute.begin() + backward_index(ds_.compute, stage, microbatch),
                       Op{OpKind::kR, stage, microbatch});
  }

  const Problem& p_;
  const Timeline& t_;
  DeviceSchedule& ds_;
  const ScheduleRules& rules_;
  // By op id of an F: 1 if its activation was recomputed or offloaded before this repair, 2 if
  // this repair changed it; by op id of a W: 2 if this repair moved it. And which are offloaded.
  std::vector<char> decided_, offloaded_;
  std::vector<Op> backs_;
  std::vector<OffloadAt> offloads_;
};

// Fixes device d's peak (or every overflow) in s, given the timeline t of s (with its memory
// curve for every_overflow); false if nothing could move.
bool repair_device(const Problem& p, const Timeline& t, int d, bool every_overflow, const ScheduleRules& rules,
                   Schedule& s) {
  DeviceRepair repair(p, t, d, s.devices[d], rules);
  const int64_t budget = p.devices[d].mem_budget_bytes;
  bool changed = false;
  std::priority_queue<Freed, std::vector<Freed>, std::greater<Freed>> active;
  int64_t freed_now = 0;
  const std::vector<MemoryPoint> at_peak = {{t.devices[d].peak_time_us, t.devices[d].peak_bytes}};
  for (const MemoryPoint& point : every_overflow ? t.memory[d] : at_peak) {
    while (!active.empty() && active.top().until_us <= point.time_us) {
      freed_now -= active.top().bytes;
      active.pop();
    }
    int64_t over = point.bytes - freed_now - budget;
    if (over <= 0) continue;
    for (const Candidate& c : repair.alive_at(point.time_us)) {
      if (over <= 0) break;
      const Freed freed = repair.apply(c, point.time_us);
      changed = true;
      over -= freed.bytes;
      freed_now += freed.bytes;
      active.push(freed);
    }
  }
  repair.insert_chosen_offloads();
  return changed;
}

}  // namespace

Schedule repair_memory(const Problem& p, const Schedule& start, int max_rounds, bool every_overflow,
                       std::chrono::steady_clock::time_point deadline, const ScheduleRules& rules) {
  Schedule s = start;
  for (int round = 0; round < max_rounds && std::chrono::steady_clock::now() < deadline; round++) {
    SimResult r = simulate(p, s, {.op_times = true, .memory_curve = every_overflow, .any_timing = false});
    if (!r.ok()) return start;
    bool changed = false, overflows = false;
    for (int d = 0; d < p.num_devices; d++) {
      if (r.timeline.devices[d].peak_bytes <= p.devices[d].mem_budget_bytes) continue;
      overflows = true;
      changed = repair_device(p, r.timeline, d, every_overflow, rules, s) || changed;
    }
    if (!overflows || !changed) return s;
  }
  return s;
}

}  // namespace optpipe
