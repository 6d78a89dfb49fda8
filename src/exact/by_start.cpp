#include "exact/by_start.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "optimize/search.h"
#include "optpipe/any_timing.h"
#include "optpipe/simulate.h"

namespace optpipe {

Schedule schedule_by_start(const Problem& p, const std::vector<Op>& ops,
                           const std::function<double(const Op&)>& start) {
  auto kind_rank = [](OpKind k) { return k == OpKind::kF ? 0 : k == OpKind::kR ? 1 : k == OpKind::kW ? 3 : 2; };
  Schedule s;
  s.placement = p.placement;
  s.chunks_per_device = p.chunks_per_device;
  s.devices.resize(p.num_devices);
  for (const Op& op : ops) s.devices[p.device_of(op.stage)].compute.push_back(op);
  auto tie_key = [](const Op& op) { return op.kind == OpKind::kB || op.kind == OpKind::kBW ? -op.stage : op.stage; };
  for (DeviceSchedule& ds : s.devices)
    std::stable_sort(ds.compute.begin(), ds.compute.end(), [&](const Op& a, const Op& b) {
      const double sa = start(a), sb = start(b);
      if (std::abs(sa - sb) > 1e-6) return sa < sb;
      if (kind_rank(a.kind) != kind_rank(b.kind)) return kind_rank(a.kind) < kind_rank(b.kind);
      if (tie_key(a) != tie_key(b)) return tie_key(a) < tie_key(b);
      return a.microbatch < b.microbatch;
    });
  return s;
}

namespace {

bool allocates(OpKind k) { return k == OpKind::kF || k == OpKind::kR; }

}  // namespace

void add_transfers_by_start(const Problem& p, const std::function<double(const Op&)>& start,
                            const std::function<double(const Op&)>& end, std::vector<TransferTimes> transfers,
                            Schedule* s) {
  constexpr double kEps = 1e-6;
  std::vector<std::vector<std::pair<double, Op>>> waits(p.num_devices);  // (offload end, WAIT)
  std::stable_sort(transfers.begin(), transfers.end(),
                   [](const TransferTimes& a, const TransferTimes& b) { return a.offload_start < b.offload_start; });
  for (const TransferTimes& t : transfers) {
    const int d = p.device_of(t.stage);
    s->devices[d].offloads.push_back({OpKind::kOffload, t.stage, t.microbatch});
    waits[d].push_back({t.offload_end, Op{OpKind::kWait, t.stage, t.microbatch}});
  }
  for (int d = 0; d < p.num_devices; d++) {
    std::vector<Op>& compute = s->devices[d].compute;
    std::stable_sort(waits[d].begin(), waits[d].end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Op> with_waits;
    size_t next_wait = 0;
    for (const Op& op : compute) {
      // Waits for what ended by the time this allocation started, and not a moment longer.
      if (allocates(op.kind))
        for (; next_wait < waits[d].size() && waits[d][next_wait].first <= start(op) + kEps; next_wait++)
          with_waits.push_back(waits[d][next_wait].second);
      with_waits.push_back(op);
    }
    compute = std::move(with_waits);
  }
  std::stable_sort(transfers.begin(), transfers.end(),
                   [](const TransferTimes& a, const TransferTimes& b) { return a.reload_start < b.reload_start; });
  for (const TransferTimes& t : transfers) {
    DeviceSchedule& ds = s->devices[p.device_of(t.stage)];
    const int b = backward_index(ds.compute, t.stage, t.microbatch);
    int anchor = -1;
    for (int k = 0; k < b; k++)
      if (ds.compute[k].kind != OpKind::kWait && start(ds.compute[k]) <= t.reload_start + kEps) anchor = k;
    OPTPIPE_CHECK(anchor >= 0, "a reload must start after its forward");
    // And after whichever ended last before it, the anchor or an offload, when that was after the
    // anchor started.
    std::optional<Op> after;  // one op suffices: the one that ended last
    double after_end = start(ds.compute[anchor]);
    if (end(ds.compute[anchor]) <= t.reload_start + kEps && end(ds.compute[anchor]) > after_end) {
      after = ds.compute[anchor];
      after_end = end(ds.compute[anchor]);
    }
    for (const TransferTimes& o : transfers)
      if (p.device_of(o.stage) == p.device_of(t.stage) && o.offload_end > after_end &&
          o.offload_end <= t.reload_start + kEps && !(o.stage == t.stage && o.microbatch == t.microbatch)) {
        after = Op{OpKind::kOffload, o.stage, o.microbatch};
        after_end = o.offload_end;
      }
    ReloadEntry entry{Op{OpKind::kReload, t.stage, t.microbatch}, ds.compute[anchor], {}};
    if (after) entry.after.push_back(*after);
    ds.reloads.push_back(entry);
  }
}

}  // namespace optpipe
