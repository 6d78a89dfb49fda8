// One device's schedule as three chains of memory events — compute-stream events, offload ends,
// reload starts — and what each event forces to have happened first. Private to the worst-case
// analysis and the gating pass (any_timing.h).
//
// Compute events: 2k is the start of compute[k], 2k+1 its end; a compute prefix P holds events
// 0..P−1. Offloads and reloads are counted in channel order: "o offloads" means the first o have
// ended, "r reloads" that the first r have started.
#pragma once

#include <cstdint>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

// Lookups shared by every device of one schedule, sized once.
struct OrderLookups {
  std::vector<int> compute_pos;     // by op id: position in its device's compute list, −1 if absent
  std::vector<int> offload_pos;     // by stage·M + mb: 1-based position on its device's offload list, 0 if none
  std::vector<int> reload_pos;      // by stage·M + mb: 1-based position on its device's reload list, 0 if none
  std::vector<uint8_t> recomputed;  // by stage·M + mb: R(s,i) is on the schedule

  explicit OrderLookups(const Problem& p, const Schedule& s);
};

struct DeviceOrders {
  int64_t static_bytes = 0;
  std::vector<int64_t> delta;     // per compute event: bytes allocated (> 0) or freed (< 0)
  std::vector<int> wait_forces;   // per compute event: offloads a WAIT starting there forces (0: none)
  std::vector<int> start_forces;  // per compute event: reloads a B/BW starting there forces (0: none)
  // Index 0 is "none"; entries 1..n are cumulative over the chain.
  std::vector<int64_t> offload_bytes_sum;  // bytes freed by the first o offloads
  std::vector<int> offload_needs_compute;  // compute prefix the first o offloads' ends need
  std::vector<int64_t> reload_bytes_sum;   // bytes allocated by the first r reloads
  std::vector<int> reload_needs_offloads;  // offloads the first r reloads' starts force
  std::vector<int> reload_needs_compute;   // compute prefix the first r reloads' starts need
  // Sparse table of argmax over r of reloads_net(r), for ranges of reloads.
  std::vector<std::vector<int>> argmax_table;

  // Bytes the first r reloads hold once the offloads their starts force have ended.
  int64_t reloads_net(int r) const { return reload_bytes_sum[r] - offload_bytes_sum[reload_needs_offloads[r]]; }
  int argmax_reloads_net(int lo, int hi) const;  // over r in [lo, hi], lo ≤ hi

  int num_compute_events() const { return static_cast<int>(delta.size()); }
  int num_offloads() const { return static_cast<int>(offload_bytes_sum.size()) - 1; }
  int num_reloads() const { return static_cast<int>(reload_bytes_sum.size()) - 1; }
};

// InvalidInput when a reload has no offload, a WAIT's offload or an offload's forward is missing,
// or an anchor or `after` is not on the device's compute list.
Status build_device_orders(const Problem& p, const Schedule& s, int device, const OrderLookups& at, DeviceOrders* out);

// The heaviest state closed under "must happen before", at growing compute prefixes. Offloads
// forced from outside (a WAIT the gating pass is about to insert) can be added as it goes.
class WorstCaseSweep {
 public:
  explicit WorstCaseSweep(const DeviceOrders& o);  // at prefix 0

  // Takes in the next compute event. Fails when the state's orders contradict each other (the
  // schedule cannot run).
  Status step();
  void force_offloads(int o);  // as if a WAIT for the o-th offload started before the next event

  int prefix() const { return P_; }
  int64_t bytes() const { return bytes_; }  // the heaviest state at this prefix, static included
  int forced_offloads() const;              // what the compute prefix alone forces to have ended

 private:
  Status evaluate();

  const DeviceOrders* o_;
  int P_ = 0;
  int64_t compute_bytes_ = 0;
  int wait_forced_ = 0, rmin_ = 0, rmax_ = 0, t_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace optpipe
