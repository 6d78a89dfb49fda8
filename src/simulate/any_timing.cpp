// The worst-case memory of a schedule over every timing (any_timing.h).
//
// A moment of a run is a set of events that have happened, closed under "must happen before".
// On one device the memory events lie on three chains — compute-stream starts and ends (fixed
// order), offload ends (FIFO on the device-to-host channel), reload starts (FIFO on the
// host-to-device channel) — so a moment is fixed by how far each chain has got: a compute prefix
// P, o offloads ended and r reloads started. Other devices only delay this one's events; a path
// through them returns to this device's compute stream, whose order already holds.
//
// At prefix P the compute stream forces some offloads (WAITs passed, and the offloads forced by
// reloads that started backwards need) and some reloads (those started backwards need); a reload
// may have started once its anchor and compute `after` ops are in the prefix, and it forces its
// own offload and its `after` offloads. Offload ends only free and reload starts only allocate,
// so the heaviest moment at P takes the fewest offloads its reloads force and the best count of
// reloads: those that force no offload beyond what P forces (take all of them), or a range-max
// over the rest. Both bounds move one way as P grows, so a sweep with a sparse table is
// O(n log n) per device.
#include "optpipe/any_timing.h"

#include <algorithm>
#include <string>

#include "simulate/device_orders.h"

namespace optpipe {

OrderLookups::OrderLookups(const Problem& p, const Schedule& s) {
  const size_t slots = static_cast<size_t>(p.num_stages()) * p.num_microbatches;
  compute_pos.assign(num_op_ids(p), -1);
  offload_pos.assign(slots, 0);
  reload_pos.assign(slots, 0);
  recomputed.assign(slots, 0);
  auto slot = [&](const Op& op) { return static_cast<size_t>(op.stage) * p.num_microbatches + op.microbatch; };
  auto in_range = [&](const Op& op) {
    return op.stage >= 0 && op.stage < p.num_stages() && op.microbatch >= 0 && op.microbatch < p.num_microbatches;
  };
  for (const DeviceSchedule& ds : s.devices) {
    for (size_t k = 0; k < ds.compute.size(); k++) {
      if (!in_range(ds.compute[k])) continue;
      compute_pos[op_id(p, ds.compute[k])] = static_cast<int>(k);
      if (ds.compute[k].kind == OpKind::kR) recomputed[slot(ds.compute[k])] = 1;
    }
    for (size_t j = 0; j < ds.offloads.size(); j++)
      if (in_range(ds.offloads[j])) offload_pos[slot(ds.offloads[j])] = static_cast<int>(j) + 1;
    for (size_t j = 0; j < ds.reloads.size(); j++)
      if (in_range(ds.reloads[j].reload)) reload_pos[slot(ds.reloads[j].reload)] = static_cast<int>(j) + 1;
  }
}

int DeviceOrders::argmax_reloads_net(int lo, int hi) const {
  int level = 0;
  while ((2 << level) <= hi - lo + 1) level++;
  const int a = argmax_table[level][lo], b = argmax_table[level][hi - (1 << level) + 1];
  return reloads_net(b) > reloads_net(a) ? b : a;
}

Status build_device_orders(const Problem& p, const Schedule& s, int d, const OrderLookups& at, DeviceOrders* out) {
  const DeviceSchedule& ds = s.devices[d];
  const int M = p.num_microbatches;
  auto slot = [&](const Op& op) { return static_cast<size_t>(op.stage) * M + op.microbatch; };
  auto bad = [&](const std::string& what) { return Status::Invalid("device " + std::to_string(d) + ": " + what); };
  // Position on this device's compute list, −1 if it is not there.
  auto compute_pos = [&](const Op& op) {
    if (op.stage < 0 || op.stage >= p.num_stages() || op.microbatch < 0 || op.microbatch >= M) return -1;
    if (p.device_of(op.stage) != d) return -1;
    return at.compute_pos[op_id(p, op)];
  };
  DeviceOrders& o = *out;
  o.static_bytes = p.devices[d].static_bytes;
  const int n = static_cast<int>(ds.compute.size());
  o.delta.assign(2 * n, 0);
  o.wait_forces.assign(2 * n, 0);
  o.start_forces.assign(2 * n, 0);
  for (int k = 0; k < n; k++) {
    const Op& op = ds.compute[k];
    const bool recomputed = op.kind == OpKind::kF && at.recomputed[slot(op)];
    o.delta[2 * k] = memory_delta(p, op, true, recomputed);
    o.delta[2 * k + 1] = memory_delta(p, op, false, recomputed);
    if (op.kind == OpKind::kWait) {
      o.wait_forces[2 * k] = at.offload_pos[slot(op)];
      if (o.wait_forces[2 * k] == 0) return bad(op_name(op) + " waits for an offload the schedule does not hold");
    }
    if (op.kind == OpKind::kB || op.kind == OpKind::kBW) o.start_forces[2 * k] = at.reload_pos[slot(op)];
  }

  o.offload_bytes_sum.assign(1, 0);
  o.offload_needs_compute.assign(1, 0);
  for (const Op& off : ds.offloads) {
    const int f = compute_pos(Op{OpKind::kF, off.stage, off.microbatch});
    if (f < 0) return bad(op_name(off) + " has no forward on this device");
    o.offload_bytes_sum.push_back(o.offload_bytes_sum.back() + p.stages[off.stage].act_f_bytes);
    o.offload_needs_compute.push_back(std::max(o.offload_needs_compute.back(), 2 * f + 2));
  }

  o.reload_bytes_sum.assign(1, 0);
  o.reload_needs_offloads.assign(1, 0);
  o.reload_needs_compute.assign(1, 0);
  for (const ReloadEntry& r : ds.reloads) {
    const int own = at.offload_pos[slot(r.reload)];
    if (own == 0) return bad(op_name(r.reload) + " has no offload");
    int needs_o = std::max(o.reload_needs_offloads.back(), own);
    const int anchor = compute_pos(r.anchor);
    if (anchor < 0) return bad(op_name(r.reload) + " is anchored to " + op_name(r.anchor) + ", not on this device");
    int needs_c = std::max(o.reload_needs_compute.back(), 2 * anchor + 1);
    for (const Op& x : r.after) {
      if (x.kind == OpKind::kOffload) {
        const int j = x.stage >= 0 && x.stage < p.num_stages() && x.microbatch >= 0 && x.microbatch < M &&
                              p.device_of(x.stage) == d
                          ? at.offload_pos[slot(x)]
                          : 0;
        if (j == 0) return bad(op_name(r.reload) + " waits for " + op_name(x) + ", not on this device");
        needs_o = std::max(needs_o, j);
      } else {
        const int k = compute_pos(x);
        if (k < 0) return bad(op_name(r.reload) + " waits for " + op_name(x) + ", not on this device");
        needs_c = std::max(needs_c, 2 * k + 2);
      }
    }
    o.reload_bytes_sum.push_back(o.reload_bytes_sum.back() + p.stages[r.reload.stage].act_f_bytes);
    o.reload_needs_offloads.push_back(needs_o);
    o.reload_needs_compute.push_back(std::max(needs_c, o.offload_needs_compute[needs_o]));
  }

  const int q = o.num_reloads();
  o.argmax_table.assign(1, std::vector<int>(q + 1));
  for (int r = 0; r <= q; r++) o.argmax_table[0][r] = r;
  for (int level = 1; (1 << level) <= q + 1; level++) {
    const std::vector<int>& prev = o.argmax_table[level - 1];
    std::vector<int> row(q + 1);
    for (int r = 0; r + (1 << level) <= q + 1; r++) {
      const int a = prev[r], b = prev[r + (1 << (level - 1))];
      row[r] = o.reloads_net(b) > o.reloads_net(a) ? b : a;
    }
    o.argmax_table.push_back(std::move(row));
  }
  return Status::Ok();
}

WorstCaseSweep::WorstCaseSweep(const DeviceOrders& o) : o_(&o) {
  while (rmax_ < o_->num_reloads() && o_->reload_needs_compute[rmax_ + 1] <= 0) rmax_++;
  bytes_ = o_->static_bytes;
}

int WorstCaseSweep::forced_offloads() const { return std::max(wait_forced_, o_->reload_needs_offloads[rmin_]); }

void WorstCaseSweep::force_offloads(int o) { wait_forced_ = std::max(wait_forced_, o); }

Status WorstCaseSweep::step() {
  const int e = P_++;
  compute_bytes_ += o_->delta[e];
  wait_forced_ = std::max(wait_forced_, o_->wait_forces[e]);
  rmin_ = std::max(rmin_, o_->start_forces[e]);
  while (rmax_ < o_->num_reloads() && o_->reload_needs_compute[rmax_ + 1] <= P_) rmax_++;
  return evaluate();
}

Status WorstCaseSweep::evaluate() {
  if (rmin_ > rmax_) return Status::Invalid("a backward needs a reload that cannot have started yet");
  const int forced = forced_offloads();
  if (o_->offload_needs_compute[forced] > P_)
    return Status::Invalid("a wait needs an offload whose forward comes after it");
  // Reloads 1..t_ force no offload beyond `forced`: with those, the more the heavier.
  while (t_ < o_->num_reloads() && o_->reload_needs_offloads[t_ + 1] <= forced) t_++;
  int64_t transfers = o_->reload_bytes_sum[std::min(t_, rmax_)] - o_->offload_bytes_sum[forced];
  if (t_ + 1 <= rmax_) transfers = std::max(transfers, o_->reloads_net(o_->argmax_reloads_net(t_ + 1, rmax_)));
  bytes_ = o_->static_bytes + compute_bytes_ + transfers;
  return Status::Ok();
}

Result<std::vector<WorstCase>> worst_case_peaks(const Problem& p, const Schedule& s) {
  using R = Result<std::vector<WorstCase>>;
  if (static_cast<int>(s.devices.size()) != p.num_devices)
    return R::Error(Status::Invalid("schedule has " + std::to_string(s.devices.size()) + " devices, problem has " +
                                    std::to_string(p.num_devices)));
  const OrderLookups at(p, s);
  std::vector<WorstCase> out(p.num_devices);
  DeviceOrders orders;
  for (int d = 0; d < p.num_devices; d++) {
    if (Status st = build_device_orders(p, s, d, at, &orders); !st.ok()) return R::Error(st);
    WorstCase& w = out[d];
    WorstCaseSweep sweep(orders);
    w.peak_bytes = sweep.bytes();
    const std::vector<Op>& compute = s.devices[d].compute;
    int last_started = -1;  // the last compute op other than a WAIT whose start is in the prefix
    while (sweep.prefix() < orders.num_compute_events()) {
      const int e = sweep.prefix();
      if (Status st = sweep.step(); !st.ok())
        return R::Error(Status::Invalid("device " + std::to_string(d) + ": " + st.message));
      if (e % 2 == 0 && compute[e / 2].kind != OpKind::kWait) last_started = e / 2;
      if (sweep.bytes() > w.peak_bytes) {
        w.peak_bytes = sweep.bytes();
        if (last_started >= 0) w.during = compute[last_started];
      }
    }
  }
  return R::Of(std::move(out));
}

}  // namespace optpipe
