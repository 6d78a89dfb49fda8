// The gates that make a schedule fit under any timing (any_timing.h).
//
// On a device whose worst case is over its budget, every moment of a run is made no heavier
// than a moment of the nominal run, which fits:
//   1. a reload may not start before the compute event it followed nominally: its anchor moves
//      to that op when the event is a start, or the op joins its `after` when it is an end;
//   2. a reload waits (`after`) for the last offload that had ended before it nominally;
//   3. an allocation on the compute stream waits (WAIT) for the offloads that had ended before it
//      nominally — only where the moments up to the next allocation could overflow without it.
// Then at any moment the reloads started are ones that nominally started before the compute
// stream's position; if the last of them started after the last allocation, the moment is no
// heavier than the nominal one right after that reload (gate 2), else than the nominal one right
// after that allocation (gate 3). Each gate holds at nominal timings, so nothing moves there.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "optpipe/any_timing.h"
#include "optpipe/passes.h"
#include "simulate/device_orders.h"

namespace optpipe {
namespace {

class DeviceGater {
 public:
  DeviceGater(const Problem& p, int device, const Timeline& nominal, const OrderLookups& at, Schedule* s)
      : p_(p), d_(device), t_(nominal), at_(at), s_(*s), ds_(s->devices[device]) {}

  void run(Gated* out) {
    gate_reloads();
    gate_allocations(out);
  }

 private:
  double start(const Op& op) const { return t_.start_us[op_id(p_, op)]; }
  double end(const Op& op) const { return t_.end_us[op_id(p_, op)]; }
  double event_time(int e) const { return e % 2 == 0 ? start(ds_.compute[e / 2]) : end(ds_.compute[e / 2]); }

  DeviceOrders orders() const {
    DeviceOrders o;
    const Status st = build_device_orders(p_, s_, d_, at_, &o);
    OPTPIPE_CHECK(st.ok(), "a schedule to gate must have consistent orders: " + st.message);
    return o;
  }

  // Gates 1 and 2.
  void gate_reloads() {
    const DeviceOrders before = orders();
    const int num_events = before.num_compute_events();
    int e = 0;         // compute events nominally before the current reload (all at equal times)
    int offloads = 0;  // offloads nominally ended by then
    int added_compute = 0;
    for (int j = 1; j <= before.num_reloads(); j++) {
      ReloadEntry& r = ds_.reloads[j - 1];
      const double at = start(r.reload);
      while (e < num_events && event_time(e) <= at) e++;
      const int backward = backward_pos(r.reload);
      const int follows = std::min(e, 2 * backward) - 1;  // the compute event it followed, before its backward
      if (follows >= 0 && std::max(before.reload_needs_compute[j], added_compute) < follows + 1) {
        const Op& op = ds_.compute[follows / 2];
        if (follows % 2 == 0)
          r.anchor = op;
        else
          r.after.push_back(op);
        added_compute = follows + 1;
      }
    }
    // Offloads forced by reaching a compute prefix: swept once, as the prefixes only grow.
    const DeviceOrders now = orders();
    WorstCaseSweep sweep(now);
    int added_offloads = 0;
    for (int j = 1; j <= now.num_reloads(); j++) {
      ReloadEntry& r = ds_.reloads[j - 1];
      while (offloads < now.num_offloads() && end(ds_.offloads[offloads]) <= start(r.reload)) offloads++;
      while (sweep.prefix() < now.reload_needs_compute[j]) OPTPIPE_CHECK(sweep.step().ok(), "gated orders hold");
      const int forced = std::max({now.reload_needs_offloads[j], added_offloads, sweep.forced_offloads()});
      if (forced < offloads) {
        r.after.push_back(ds_.offloads[offloads - 1]);
        added_offloads = offloads;
      }
    }
  }

  // Gate 3.
  void gate_allocations(Gated* out) {
    const DeviceOrders o = orders();
    const int64_t budget = p_.devices[d_].mem_budget_bytes;
    const int n = static_cast<int>(ds_.compute.size());
    WorstCaseSweep sweep(o);
    std::vector<std::pair<int, Op>> waits;  // (before compute position, WAIT)
    int offloads = 0;
    for (int k = 0; k < n; k++) {
      const Op op = ds_.compute[k];
      if (o.delta[2 * k] > 0 && op.kind != OpKind::kWait) {
        while (offloads < o.num_offloads() && end(ds_.offloads[offloads]) <= start(op)) offloads++;
        WorstCaseSweep probe = sweep;
        OPTPIPE_CHECK(probe.step().ok(), "gated orders hold");
        bool over = probe.forced_offloads() < offloads && probe.bytes() > budget;
        // ... or at any moment up to the next allocation.
        for (int e = 2 * k + 1;
             !over && probe.forced_offloads() < offloads && e < 2 * n && !(e % 2 == 0 && o.delta[e] > 0); e++) {
          OPTPIPE_CHECK(probe.step().ok(), "gated orders hold");
          over = probe.bytes() > budget;
        }
        if (over) {
          sweep.force_offloads(offloads);
          const Op& off = ds_.offloads[offloads - 1];
          waits.push_back({k, Op{OpKind::kWait, off.stage, off.microbatch}});
        }
      }
      OPTPIPE_CHECK(sweep.step().ok() && sweep.step().ok(), "gated orders hold");
    }
    if (waits.empty()) return;
    // A WAIT moved up replaces the one that stood later for the same offload.
    std::vector<Op> compute;
    compute.reserve(ds_.compute.size() + waits.size());
    size_t next = 0;
    for (int k = 0; k < n; k++) {
      for (; next < waits.size() && waits[next].first == k; next++) compute.push_back(waits[next].second);
      const Op& op = ds_.compute[k];
      if (op.kind == OpKind::kWait &&
          std::any_of(waits.begin(), waits.begin() + next, [&](const auto& w) { return w.second == op; })) {
        keep_reloads_at_moved_wait(k);
        continue;
      }
      compute.push_back(op);
    }
    ds_.compute = std::move(compute);
    out->waits_added += static_cast<int>(waits.size());
  }

  // Reloads name ops, not positions: one anchored at (or `after`) the WAIT at compute position k,
  // which is about to move up, would move up with it and start sooner than it did nominally. A
  // WAIT starts when the op before it has ended and its offload has ended, so the reload waits
  // for exactly those two instead.
  void keep_reloads_at_moved_wait(int k) {
    const Op wait = ds_.compute[k];
    // The compute op before it, and the offloads of the WAITs in between (which may move too).
    std::vector<Op> waited_for{Op{OpKind::kOffload, wait.stage, wait.microbatch}};
    int prev = k - 1;
    for (; prev >= 0 && ds_.compute[prev].kind == OpKind::kWait; prev--)
      waited_for.push_back(Op{OpKind::kOffload, ds_.compute[prev].stage, ds_.compute[prev].microbatch});
    OPTPIPE_CHECK(prev >= 0, "a WAIT follows the forward whose offload it waits for");
    const Op before = ds_.compute[prev];
    waited_for.push_back(before);
    for (ReloadEntry& r : ds_.reloads) {
      const bool anchored = r.anchor == wait;
      const auto was_after = std::find(r.after.begin(), r.after.end(), wait);
      if (!anchored && was_after == r.after.end()) continue;
      if (was_after != r.after.end()) r.after.erase(was_after);
      if (anchored) r.anchor = before;
      for (const Op& op : waited_for)
        if (std::find(r.after.begin(), r.after.end(), op) == r.after.end()) r.after.push_back(op);
    }
  }

  int backward_pos(const Op& reload) const {
    const int b = at_.compute_pos[op_id(p_, Op{OpKind::kB, reload.stage, reload.microbatch})];
    return b >= 0 ? b : at_.compute_pos[op_id(p_, Op{OpKind::kBW, reload.stage, reload.microbatch})];
  }

  const Problem& p_;
  const int d_;
  const Timeline& t_;
  const OrderLookups& at_;  // compute positions hold until gate 3, the last, inserts WAITs
  const Schedule& s_;
  DeviceSchedule& ds_;
};

// The worst-case peak of device d alone.
int64_t device_worst_peak(const Problem& p, const Schedule& s, int d, const OrderLookups& at) {
  DeviceOrders o;
  OPTPIPE_CHECK(build_device_orders(p, s, d, at, &o).ok(), "a gated schedule has consistent orders");
  WorstCaseSweep sweep(o);
  int64_t peak = sweep.bytes();
  while (sweep.prefix() < o.num_compute_events()) {
    OPTPIPE_CHECK(sweep.step().ok(), "a gated schedule has consistent orders");
    peak = std::max(peak, sweep.bytes());
  }
  return peak;
}

// Takes back, the last reload first, each reload gate of device d whose device stays within
// max(budget, nominal peak) without it, until the deadline. Compute positions do not change, so
// one set of lookups serves every trial.
void prune_reload_gates(const Problem& p, int d, const DeviceSchedule& before, int64_t allowed,
                        std::chrono::steady_clock::time_point deadline, Schedule* s) {
  const OrderLookups at(p, *s);
  std::vector<ReloadEntry>& reloads = s->devices[d].reloads;
  for (size_t j = reloads.size(); j-- > 0 && std::chrono::steady_clock::now() < deadline;) {
    const ReloadEntry& old = before.reloads[j];
    if (reloads[j].anchor == old.anchor && reloads[j].after == old.after) continue;
    const ReloadEntry gated = reloads[j];
    reloads[j] = old;
    if (device_worst_peak(p, *s, d, at) > allowed) reloads[j] = gated;
  }
}

// The reload gates device d has that `before` did not: moved anchors and new `after` ops.
int reload_gates(const DeviceSchedule& now, const DeviceSchedule& before) {
  int gates = 0;
  for (size_t j = 0; j < now.reloads.size(); j++) {
    gates += now.reloads[j].anchor != before.reloads[j].anchor;
    for (const Op& op : now.reloads[j].after)
      gates += std::find(before.reloads[j].after.begin(), before.reloads[j].after.end(), op) ==
               before.reloads[j].after.end();
  }
  return gates;
}

}  // namespace

Gated gate_for_any_timing(const Problem& p, const Schedule& s, const Timeline& nominal,
                          std::chrono::steady_clock::time_point prune_until) {
  Gated out{s};
  Result<std::vector<WorstCase>> worst = worst_case_peaks(p, s);
  if (!worst.ok()) return out;  // not a schedule that can run: nothing to gate
  OPTPIPE_CHECK(nominal.start_us.size() == static_cast<size_t>(num_op_ids(p)), "gating needs the nominal op times");
  // Gating one device moves no other device's ops.
  const OrderLookups at(p, s);
  for (int d = 0; d < p.num_devices; d++) {
    if (worst.value[d].peak_bytes <= p.devices[d].mem_budget_bytes) continue;
    DeviceGater(p, d, nominal, at, &out.schedule).run(&out);
    prune_reload_gates(p, d, s.devices[d], std::max(p.devices[d].mem_budget_bytes, nominal.devices[d].peak_bytes),
                       prune_until, &out.schedule);
    out.reload_gates_added += reload_gates(out.schedule.devices[d], s.devices[d]);
  }
  return out;
}

}  // namespace optpipe
