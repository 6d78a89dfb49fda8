// Editing a device's lists: finding ops, adding and taking out an activation's offload; what a
// schedule holds.
#include <algorithm>
#include <utility>
#include <vector>

#include "optpipe/schedule.h"
#include "optpipe/status.h"

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
  insert_offloads(ds, {{stage, microbatch, ds.compute[anchor]}});
}

void insert_offloads(DeviceSchedule& ds, const std::vector<OffloadAt>& adds) {
  if (adds.empty()) return;
  // Where each listed offload's F and each listed reload's backward sit, found in one pass over
  // the compute list with the listed keys sorted: lists hold thousands of ops, a scan per listed
  // op made repairs cubic, and a map of the whole list per call cost more than the moves.
  auto key = [](int s, int i) { return (static_cast<int64_t>(s) << 32) | static_cast<uint32_t>(i); };
  std::vector<int64_t> f_keys, b_keys;
  for (const OffloadAt& a : adds) f_keys.push_back(key(a.stage, a.microbatch));
  b_keys = f_keys;
  for (const Op& o : ds.offloads) f_keys.push_back(key(o.stage, o.microbatch));
  for (const ReloadEntry& r : ds.reloads) b_keys.push_back(key(r.reload.stage, r.reload.microbatch));
  std::sort(f_keys.begin(), f_keys.end());
  std::sort(b_keys.begin(), b_keys.end());
  std::vector<int> f_pos(f_keys.size(), -1), b_pos(b_keys.size(), -1);
  for (size_t k = 0; k < ds.compute.size(); k++) {
    const Op& op = ds.compute[k];
    const bool f = op.kind == OpKind::kF, b = op.kind == OpKind::kB || op.kind == OpKind::kBW;
    if (!f && !b) continue;
    const std::vector<int64_t>& keys = f ? f_keys : b_keys;
    const auto it = std::lower_bound(keys.begin(), keys.end(), key(op.stage, op.microbatch));
    if (it != keys.end() && *it == key(op.stage, op.microbatch))
      (f ? f_pos : b_pos)[it - keys.begin()] = static_cast<int>(k);
  }
  auto pos_of = [&](const std::vector<int64_t>& keys, const std::vector<int>& pos, int s, int i) {
    const int at = static_cast<int>(std::lower_bound(keys.begin(), keys.end(), key(s, i)) - keys.begin());
    OPTPIPE_CHECK(pos[at] >= 0, "an offloaded activation has its F and backward on its device");
    return pos[at];
  };
  // The new ones by position, each merged in before the first listed one at or after it.
  std::vector<std::pair<int, size_t>> by_f, by_b;  // (position, index in adds)
  for (size_t k = 0; k < adds.size(); k++) {
    by_f.push_back({pos_of(f_keys, f_pos, adds[k].stage, adds[k].microbatch), k});
    by_b.push_back({pos_of(b_keys, b_pos, adds[k].stage, adds[k].microbatch), k});
  }
  std::sort(by_f.begin(), by_f.end());
  std::sort(by_b.begin(), by_b.end());
  std::vector<Op> offloads;
  offloads.reserve(ds.offloads.size() + adds.size());
  size_t n = 0;
  for (const Op& o : ds.offloads) {
    for (const int p = pos_of(f_keys, f_pos, o.stage, o.microbatch); n < by_f.size() && by_f[n].first < p; n++)
      offloads.push_back(Op{OpKind::kOffload, adds[by_f[n].second].stage, adds[by_f[n].second].microbatch});
    offloads.push_back(o);
  }
  for (; n < by_f.size(); n++)
    offloads.push_back(Op{OpKind::kOffload, adds[by_f[n].second].stage, adds[by_f[n].second].microbatch});
  ds.offloads = std::move(offloads);
  std::vector<ReloadEntry> reloads;
  reloads.reserve(ds.reloads.size() + adds.size());
  auto reload_of = [&](const OffloadAt& a) {
    return ReloadEntry{Op{OpKind::kReload, a.stage, a.microbatch}, a.anchor};
  };
  n = 0;
  for (ReloadEntry& r : ds.reloads) {
    for (const int p = pos_of(b_keys, b_pos, r.reload.stage, r.reload.microbatch); n < by_b.size() && by_b[n].first < p;
         n++)
      reloads.push_back(reload_of(adds[by_b[n].second]));
    reloads.push_back(std::move(r));
  }
  for (; n < by_b.size(); n++) reloads.push_back(reload_of(adds[by_b[n].second]));
  ds.reloads = std::move(reloads);
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

void rename_in_reloads(DeviceSchedule& ds, const Op& from, const Op& to) {
  for (ReloadEntry& r : ds.reloads) {
    if (r.anchor == from) r.anchor = to;
    std::replace(r.after.begin(), r.after.end(), from, to);
  }
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
