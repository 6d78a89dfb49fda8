// Editing a device's lists: finding ops, adding and taking out an activation's offload; what a
// schedule holds.
#include <algorithm>
#include <unordered_map>

#include "optpipe/schedule.h"

namespace optpipe {

int find_op(const std::vector<Op>& ops, const Op& op) {
  for (size_t k = 0; k < ops.size(); k++)
    if (ops[k] == op) return static_cast<int>(k);
  return -1;
}

int backward_index(const std::vector<Op>& compute, int stage, int microbatch) {
  const int b = find_op(compute, Op{OpKind::kB, stage, microbatch});
  return b >= 0 ? b : find_op(compute, Op{OpKind::kBW, stage, microbatch});
}

void insert_offload(DeviceSchedule& ds, int stage, int microbatch, int anchor) {
  // Positions of every F and backward on the device, found in one pass: the lists can hold
  // thousands of ops, and scanning them per existing offload made repairs cubic.
  std::unordered_map<int64_t, int> f_at, b_at;
  auto key = [](int s, int i) { return (static_cast<int64_t>(s) << 32) | static_cast<uint32_t>(i); };
  for (size_t k = 0; k < ds.compute.size(); k++) {
    const Op& op = ds.compute[k];
    if (op.kind == OpKind::kF) f_at[key(op.stage, op.microbatch)] = static_cast<int>(k);
    if (op.kind == OpKind::kB || op.kind == OpKind::kBW) b_at[key(op.stage, op.microbatch)] = static_cast<int>(k);
  }
  const int f = f_at.at(key(stage, microbatch)), b = b_at.at(key(stage, microbatch));
  size_t at = 0;
  while (at < ds.offloads.size() && f_at.at(key(ds.offloads[at].stage, ds.offloads[at].microbatch)) < f) at++;
  ds.offloads.insert(ds.offloads.begin() + at, Op{OpKind::kOffload, stage, microbatch});
  at = 0;
  while (at < ds.reloads.size() && b_at.at(key(ds.reloads[at].reload.stage, ds.reloads[at].reload.microbatch)) < b)
    at++;
  ds.reloads.insert(ds.reloads.begin() + at, {Op{OpKind::kReload, stage, microbatch}, ds.compute[anchor]});
}

void remove_offload(DeviceSchedule& ds, int stage, int microbatch) {
  if (const int w = find_op(ds.compute, Op{OpKind::kWait, stage, microbatch}); w >= 0)
    ds.compute.erase(ds.compute.begin() + w);
  const Op offload{OpKind::kOffload, stage, microbatch};
  if (const int o = find_op(ds.offloads, offload); o >= 0) ds.offloads.erase(ds.offloads.begin() + o);
  for (size_t k = 0; k < ds.reloads.size(); k++)
    if (ds.reloads[k].reload.stage == stage && ds.reloads[k].reload.microbatch == microbatch) {
      ds.reloads.erase(ds.reloads.begin() + k);
      break;
    }
  for (ReloadEntry& r : ds.reloads) std::erase(r.after, offload);
}

bool has_offloads(const Schedule& s) {
  for (const DeviceSchedule& ds : s.devices)
    if (!ds.offloads.empty()) return true;
  return false;
}

bool has_compute_op(const Schedule& s, OpKind kind) {
  for (const DeviceSchedule& ds : s.devices)
    for (const Op& op : ds.compute)
      if (op.kind == kind) return true;
  return false;
}

}  // namespace optpipe
