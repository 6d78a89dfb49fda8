// The PipeOffload pass for any schedule: offloads where an activation's lifespan covers the round
// trip.
#include <algorithm>
#include <cmath>

#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

Schedule add_offloads(const Problem& p, const Schedule& base, double reload_lead, double fraction) {
  SimResult sim = simulate(p, base, {.op_times = true, .any_timing = false});
  OPTPIPE_CHECK(sim.ok(), "add_offloads needs a schedule that simulates: " + sim.status.message);
  const Timeline& t = sim.timeline;
  auto start = [&](const Op& op) { return t.start_us[op_id(p, op)]; };
  auto end = [&](const Op& op) { return t.end_us[op_id(p, op)]; };
  auto backward = [&](const Op& f) {
    const Op b{OpKind::kB, f.stage, f.microbatch};
    return std::isnan(t.start_us[op_id(p, b)]) ? Op{OpKind::kBW, f.stage, f.microbatch} : b;
  };
  // Microbatch i is among `fraction` of them when the running count ⌊(i+1)·fraction⌋ steps there.
  auto chosen = [&](int i) {
    return fraction >= 1 || std::floor((i + 1) * fraction + 1e-9) > std::floor(i * fraction + 1e-9);
  };
  // Neither offloaded nor recomputed in the base schedule: neither op was placed.
  auto kept = [&](const Op& f) {
    return std::isnan(start(Op{OpKind::kR, f.stage, f.microbatch})) &&
           std::isnan(start(Op{OpKind::kOffload, f.stage, f.microbatch}));
  };

  Schedule s = base;
  std::vector<uint8_t> offloaded(num_op_ids(p), 0);  // by the forward's op id
  std::vector<double> starts;
  for (int d = 0; d < p.num_devices; d++) {
    DeviceSchedule& ds = s.devices[d];
    // Offloads in forward order, each after the previous one on the channel.
    double d2h_free = 0;
    for (const Op& op : ds.compute) {
      if (op.kind != OpKind::kF || !chosen(op.microbatch) || !kept(op) || p.stages[op.stage].act_f_bytes == 0) continue;
      const Op bw = backward(op);
      const double off_start = std::max(end(op), d2h_free);
      const double off_end = off_start + p.offload_us(op.stage);
      const double reload_by = start(bw) - reload_lead * p.reload_us(op.stage);  // latest reload start
      if (off_end + p.reload_us(op.stage) > reload_by) continue;
      d2h_free = off_end;
      offloaded[op_id(p, op)] = 1;
    }
    // Reloads in backward order, anchored where the compute stream is reload_lead reload times
    // ahead: at the last op before the backward that starts by then (a stream's starts never
    // decrease).
    starts.clear();
    for (const Op& a : ds.compute) starts.push_back(start(a));
    for (size_t j = 0; j < ds.compute.size(); j++) {
      const Op op = ds.compute[j];
      if (op.kind != OpKind::kBW && op.kind != OpKind::kB) continue;
      if (!offloaded[op_id(p, Op{OpKind::kF, op.stage, op.microbatch})]) continue;
      const double issue_at = start(op) - reload_lead * p.reload_us(op.stage);
      const size_t after = std::upper_bound(starts.begin(), starts.begin() + j, issue_at) - starts.begin();
      if (after == 0) continue;  // cannot be issued early enough: keep this activation
      ds.offloads.push_back(Op{OpKind::kOffload, op.stage, op.microbatch});
      ds.reloads.push_back({Op{OpKind::kReload, op.stage, op.microbatch}, ds.compute[after - 1]});
    }
    // Offloads go out in forward order, reloads come back in backward order.
    std::sort(ds.offloads.begin(), ds.offloads.end(), [&](const Op& a, const Op& b) {
      return end(Op{OpKind::kF, a.stage, a.microbatch}) < end(Op{OpKind::kF, b.stage, b.microbatch});
    });
    std::sort(ds.reloads.begin(), ds.reloads.end(), [&](const ReloadEntry& a, const ReloadEntry& b) {
      return start(backward(a.reload)) < start(backward(b.reload));
    });
  }
  return s;
}

}  // namespace optpipe
