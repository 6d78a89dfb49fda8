// The bound that holds over every partition of a placement's layers: the discrete balance, the
// device terms minimised over cuts, the pair bounds (pair_bound.cpp), and the cuts they point to.
#include <algorithm>
#include <limits>
#include <vector>

#include "optimize/device_demand.h"
#include "optimize/item_sums.h"
#include "optimize/pair_bound.h"
#include "optimize/partition.h"
#include "optpipe/optimize.h"

namespace optpipe {

namespace {

// The makespan bound's device terms (bounds.cpp) for the least a partition can give each device.
// Each (s, i, j) has a bound of its own, and the least over partitions of the largest over stages
// follows by dynamic programming over the cuts.
// Where a device holds v > 1 stages, each stage is priced as if its device held it and the
// lightest item each other stage can hold (the least the others can add): that drops area, work
// and static memory but never adds them, and memory_fits_by holds for any subset. The warm-up
// idle term is priced on the device's first stage, its later stages filling it at no memory from
// their earliest heads. A stage whose work alone passes upper_us (the bound of the partition p
// has, which the least over partitions cannot pass) is not priced: that keeps the cuts priced
// O(S·L·k) for stages of at most k items.
double partition_memory_bound(const Problem& p, const ItemSums& sums, double upper_us) {
  const int S = p.num_stages(), L = static_cast<int>(p.layers.size()), M = p.num_microbatches;
  // The least work and static memory stage k can hold: its one item in the range every cut
  // leaves it (stage 0 always holds item 0, the last stage the last item); per device, what its
  // other stages add at least when one is priced.
  std::vector<double> least_work(S, std::numeric_limits<double>::infinity()), least_static(S, least_work[0]);
  for (int k = 0; k < S; k++) {
    const int lo = k == S - 1 ? L - 1 : k, hi = k == 0 ? 0 : L - S + k;
    for (int i = lo; i <= hi; i++) {
      least_work[k] = std::min(least_work[k], sums.work_us(i, i + 1));
      least_static[k] = std::min(least_static[k], sums.static_bytes(i, i + 1));
    }
  }
  std::vector<double> device_least_work(p.num_devices, 0), device_least_static(p.num_devices, 0);
  std::vector<int> first_stage_of(p.num_devices, -1);
  for (int k = S - 1; k >= 0; k--) {
    device_least_work[p.device_of(k)] += least_work[k];
    device_least_static[p.device_of(k)] += least_static[k];
    first_stage_of[p.device_of(k)] = k;
  }

  const double kInf = std::numeric_limits<double>::infinity();
  DeviceDemand dd;
  dd.num_microbatches = M;
  dd.offload = sums.offload;
  dd.recompute = sums.recompute;
  for (const LayerSpec& l : p.layers)  // what an unpriced stage's pending W's can hold
    if (l.t_w_us > 0)
      dd.unpriced_w_us_per_byte = std::max(dd.unpriced_w_us_per_byte,
                                           l.act_w_bytes < 0 ? l.t_w_us / -static_cast<double>(l.act_w_bytes) : kInf);
  auto stage_bound = [&](int s, int i, int j) {
    const int d = p.device_of(s), s0 = first_stage_of[d];
    const StageLoad sl = sums.stage(s, i, j);
    // Stage s0 holds at least one item for each stage before it.
    dd.first_us = s == s0 ? sl.head_us : sums.head_us(s0, s0);
    dd.work_us = M * (sums.work_us(i, j) + device_least_work[d] - least_work[s]);
    dd.capacity_bytes = static_cast<double>(p.devices[d].mem_budget_bytes) - sums.static_bytes(i, j) -
                        (device_least_static[d] - least_static[s]);
    dd.stages.assign(1, sl);
    dd.unpriced.clear();
    double bound = memory_bound_us(dd);
    if (s == s0) {  // the warm-up, with the device's later stages as free fill, and the cool-down
      // Stage k starts after this stage's items and one for each stage between, and ends before
      // one item for each stage after it.
      for (int k = s + 1; k < S; k++)
        if (p.device_of(k) == d)
          dd.unpriced.push_back({sums.head_us(k, j + (k - s - 1)), sums.tau_us(k, L - (S - 1 - k))});
      dd.tail_us = sums.tail_us(s, i);
      bound = std::max(bound, dd.first_us + dd.work_us + warmup_idle_us(dd) + cooldown_idle_us(dd));
    }
    return bound;
  };
  // best[j]: the least, over cuts of items [0, j) into stages 0..s, of the largest stage bound.
  std::vector<double> best(L + 1, kInf), next(L + 1, kInf);
  for (int j = 1; j <= L - (S - 1) && M * sums.work_us(0, j) <= upper_us; j++) best[j] = stage_bound(0, 0, j);
  for (int s = 1; s < S; s++) {
    std::fill(next.begin(), next.end(), kInf);
    for (int j = s + 1; j <= L - (S - 1 - s); j++)
      for (int i = j - 1; i >= s && M * sums.work_us(i, j) <= upper_us; i--)
        if (best[i] < next[j]) next[j] = std::min(next[j], std::max(best[i], stage_bound(s, i, j)));
    best.swap(next);
  }
  return best[L] == kInf ? 0 : best[L];
}

// The least busiest device over every partition, contiguity relaxed: the first item always sits
// on stage 0's device and the last on stage S−1's, every other item may go to any device, and a
// device holds at least one item per stage. At a makespan T device d has T − (its earliest start)
// − (its pinned items' work) for the rest; it fits at most the n_d smallest of them, so T is
// possible only if those counts and that time cover every unpinned item. The least such T is a
// bound (the stages' contiguous cut is one such assignment); with equal layers it is the exact
// discrete balance, which the average misses.
double partition_load_bound(const Problem& p, const ItemSums& sums) {
  const int S = p.num_stages(), L = static_cast<int>(p.layers.size()), D = p.num_devices;
  const int M = p.num_microbatches;
  if (L < S || L < 2) return 0;
  auto work = [&](int k) { return M * (p.layers[k].t_f_us + p.layers[k].t_b_us + p.layers[k].t_w_us); };
  std::vector<double> pinned_us(D, 0), first_us(D, -1), rest;
  std::vector<int> pinned_items(D, 0);
  const int first_device = p.device_of(0), last_device = p.device_of(S - 1);
  if (first_device < 0 || last_device < 0) return 0;  // no placement (check_problem refuses it)
  pinned_us[first_device] += work(0);
  pinned_us[last_device] += work(L - 1);
  pinned_items[first_device]++;
  pinned_items[last_device]++;
  double rest_us = 0;
  for (int k = 1; k + 1 < L; k++) {
    rest.push_back(work(k));
    rest_us += work(k);
  }
  std::sort(rest.begin(), rest.end());
  // A device's first stage s starts after one item for each stage before it.
  for (int s = S - 1; s >= 0; s--) first_us[p.device_of(s)] = sums.head_us(s, s);
  auto possible = [&](double T) {
    double room_us = 0;
    int64_t room_items = 0;
    for (int d = 0; d < D; d++) {
      const double cap = T - first_us[d] - pinned_us[d];
      if (cap < 0) return false;
      int n = 0;
      for (double left = cap; n < static_cast<int>(rest.size()) && rest[n] <= left; n++) left -= rest[n];
      if (n < p.chunks_per_device - pinned_items[d]) return false;
      room_us += cap;
      room_items += n;
    }
    return room_items >= static_cast<int64_t>(rest.size()) && room_us >= rest_us;
  };
  double lo = 0, hi = 1;
  for (int d = 0; d < D; d++) hi += first_us[d] + pinned_us[d];
  hi += rest_us;
  if (!possible(hi)) return 0;  // cannot happen: all on one device fits by then
  for (int k = 0; k < 60; k++) {
    const double mid = (lo + hi) / 2;
    (possible(mid) ? hi : lo) = mid;
  }
  return lo;
}

// partition_free_lower_bound, and with want.cut the pair bound's cut (V-shape, two interleaved
// chunks; else left empty).
double free_bound(const Problem& p, Objective objective, const PairRequest& want) {
  const int D = p.num_devices, M = p.num_microbatches, S = p.num_stages();
  double items_work = 0, items_chain = 0, heaviest = 0;
  for (const LayerSpec& l : p.layers) {
    items_work += l.t_f_us + l.t_b_us + l.t_w_us;
    items_chain += l.t_f_us + l.t_b_us;
    heaviest = std::max(heaviest, l.t_f_us + l.t_b_us + l.t_w_us);
  }
  if (objective == Objective::kSpan) return std::max(M * items_work / D, M * heaviest);
  int hops = 0;  // changes of device along the stages, each crossed forward and backward
  for (int s = 1; s < S; s++) hops += p.device_of(s) != p.device_of(s - 1);
  // One microbatch: every forward, every input-gradient backward, the hops, then a W on stage 0
  // (which holds the first item at least).
  const double chain = items_chain + 2 * hops * p.t_comm_us + (p.layers.empty() ? 0 : p.layers.front().t_w_us);
  // Stages 0..D−1 sit on devices 0..D−1 in every placement: device d starts no sooner than the
  // forwards of the first d items and d hops. The latest device ends no sooner than the average.
  double starts = 0, first_items_f = 0;
  for (int d = 0; d < D; d++) {
    starts += first_items_f + d * p.t_comm_us;
    if (d < static_cast<int>(p.layers.size())) first_items_f += p.layers[d].t_f_us;
  }
  const double average = (M * items_work + starts) / D;
  if (p.layers.size() < static_cast<size_t>(S)) return std::max({chain, average, M * heaviest});
  const ItemSums sums(p, want.rules);
  const double own_us = makespan_lower_bound(p, want.rules);  // p's own partition: the least cannot pass it
  const double bound =
      std::max({chain, average, M * heaviest, partition_load_bound(p, sums), partition_memory_bound(p, sums, own_us)});
  return std::max(
      {bound, vshape_pair_bound(p, sums, bound, own_us, want), interleaved_pair_bound(p, sums, bound, own_us, want)});
}

}  // namespace

double partition_free_lower_bound(const Problem& p, Objective objective, std::chrono::steady_clock::time_point deadline,
                                  const ScheduleRules& rules) {
  return free_bound(p, objective, {deadline, nullptr, rules});
}

BoundGuidedCuts bound_guided_cuts(const Problem& p, std::chrono::steady_clock::time_point deadline,
                                  const ScheduleRules& rules) {
  BoundGuidedCuts out;
  if (p.placement == Placement::kLinear || p.chunks_per_device != 2 || !layers_match(p)) return out;
  const std::vector<int> own = items_per_stage(p);
  std::vector<int> pair_cut;
  out.free_bound_us = free_bound(p, Objective::kMakespan, {deadline, &pair_cut, rules});
  out.free_bound_complete = std::chrono::steady_clock::now() <= deadline;
  for (const std::vector<int>& cut : {lighter_first(p), pair_cut})
    if (!cut.empty() && cut != own && std::find(out.cuts.begin(), out.cuts.end(), cut) == out.cuts.end())
      out.cuts.push_back(cut);
  return out;
}

}  // namespace optpipe
