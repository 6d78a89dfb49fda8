// The bound that holds over every partition of a placement's layers: the discrete balance, the
// device terms minimised over cuts, the V-shape's and two interleaved chunks' pair bounds, and the
// cuts those point to.
#include "optimize/partition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "optimize/device_demand.h"
#include "optpipe/optimize.h"

namespace optpipe {

namespace {

// Stage s of p holding items [i, j): its spec as cut_layers builds it, and where it sits (its
// head follows from the items before i, its round trip from those from j on), from prefix sums.
class ItemSums {
 public:
  ItemSums(const Problem& p, const ScheduleRules& rules)
      : offload(rules.offload),
        recompute(rules.recompute),
        p_(p),
        S_(p.num_stages()),
        L_(static_cast<int>(p.layers.size())) {
    for (std::vector<double>* v : {&t_f_, &t_b_, &t_w_, &t_r_, &act_f_, &act_w_, &static_}) v->assign(L_ + 1, 0);
    for (int k = 0; k < L_; k++) {  // [k]: the sum over items 0..k−1
      const LayerSpec& l = p.layers[k];
      t_f_[k + 1] = t_f_[k] + l.t_f_us;
      t_b_[k + 1] = t_b_[k] + l.t_b_us;
      t_w_[k + 1] = t_w_[k] + l.t_w_us;
      t_r_[k + 1] = t_r_[k] + l.t_r_us;
      act_f_[k + 1] = act_f_[k] + static_cast<double>(l.act_f_bytes);
      act_w_[k + 1] = act_w_[k] + static_cast<double>(l.act_w_bytes);
      static_[k + 1] = static_[k] + static_cast<double>(l.static_bytes);
    }
    hops_before_.assign(S_, 0);  // changes of device before stage s
    for (int s = 1; s < S_; s++) hops_before_[s] = hops_before_[s - 1] + (p.device_of(s) != p.device_of(s - 1));
  }

  double work_us(int i, int j) const { return t_f_[j] - t_f_[i] + t_b_[j] - t_b_[i] + t_w_[j] - t_w_[i]; }
  double static_bytes(int i, int j) const { return static_[j] - static_[i]; }
  // The earliest stage s's first forward can start when its first item is i.
  double head_us(int s, int i) const { return t_f_[i] + hops_before_[s] * p_.t_comm_us; }
  // The earliest stage s's first backward can start when its last item ends before j.
  double tau_us(int s, int j) const {
    return t_f_[L_] + t_b_[L_] - t_b_[j] + (2 * hops_before_[S_ - 1] - hops_before_[s]) * p_.t_comm_us;
  }
  // After stage s's B when its first item is i, to the microbatch's end at least (bounds.cpp's
  // tails): the items before i back, the hops, and item 0's W (stage 0 holds it).
  double tail_us(int s, int i) const {
    return s == 0 ? 0 : t_b_[i] + hops_before_[s] * p_.t_comm_us + p_.layers[0].t_w_us;
  }

  StageLoad stage(int s, int i, int j) const {
    StageLoad sl;
    StageSpec& st = sl.spec;
    st.t_f_us = t_f_[j] - t_f_[i];
    st.t_b_us = t_b_[j] - t_b_[i];
    st.t_w_us = t_w_[j] - t_w_[i];
    st.t_r_us = t_r_[j] - t_r_[i];
    st.act_f_bytes = static_cast<int64_t>(act_f_[j] - act_f_[i]);
    st.act_w_bytes = static_cast<int64_t>(act_w_[j] - act_w_[i]);
    st.act_input_bytes = std::min(p_.layers[i].act_input_bytes, st.act_f_bytes);
    sl.head_us = head_us(s, i);
    sl.round_trip_us =
        (t_f_[L_] - t_f_[j]) + (t_b_[L_] - t_b_[j]) + 2 * (hops_before_[S_ - 1] - hops_before_[s]) * p_.t_comm_us;
    sl.offload_us = p_.host_link.d2h_us(st.act_f_bytes);
    sl.reload_us = p_.host_link.h2d_us(st.act_f_bytes);
    sl.after_b_us = s == 0 ? st.t_w_us : tail_us(s, i);
    // The stages before hold items [0, i): the slowest of them is at least their mean.
    sl.f_interval_us = std::max(st.t_f_us, s > 0 ? t_f_[i] / s : 0);
    return sl;
  }

  const bool offload, recompute;  // the choices the rules allow, for every DeviceDemand priced

 private:
  const Problem& p_;
  int S_, L_;
  std::vector<double> t_f_, t_b_, t_w_, t_r_, act_f_, act_w_, static_;
  std::vector<int> hops_before_;
};

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

// measured: 1e6 checks take about 0.16 s on D = 64, L = 322
constexpr int64_t kPairChecks = 1'000'000;
// A pair bound's cut is taken at this much above the least makespan its test finds possible: at
// that least one the cut is forced to extremes (e.g. the embedding alone on stage 0, every item
// the bound does not need early piled on the last stage), which the families run slowly.
constexpr double kCutSlack = 0.01;

// Whether device d, holding stages s1 = items [a, a2) and s2 = items [b, b2) (s1 < s2), has its
// bound (bounds.cpp's warm-up, cool-down and memory-area terms, both stages together, exactly as
// for one partition) within T. The pair bounds below count each call against a budget.
class PairCheck {
 public:
  PairCheck(const Problem& p, const ItemSums& sums) : p_(p), sums_(sums) {
    dd_.num_microbatches = p.num_microbatches;
    dd_.offload = sums.offload;
    dd_.recompute = sums.recompute;
  }

  bool fits(int d, int s1, int a, int a2, int s2, int b, int b2, double T) {
    if (--checks_left % 1024 == 0 && std::chrono::steady_clock::now() > deadline) checks_left = 0;
    const int M = p_.num_microbatches;
    dd_.first_us = sums_.head_us(s1, a);
    dd_.work_us = M * (sums_.work_us(a, a2) + sums_.work_us(b, b2));
    if (dd_.first_us + dd_.work_us > T) return false;
    dd_.capacity_bytes =
        static_cast<double>(p_.devices[d].mem_budget_bytes) - sums_.static_bytes(a, a2) - sums_.static_bytes(b, b2);
    dd_.stages.assign({sums_.stage(s1, a, a2), sums_.stage(s2, b, b2)});
    dd_.tail_us = sums_.tail_us(s1, a);
    return dd_.first_us + dd_.work_us + warmup_idle_us(dd_) + cooldown_idle_us(dd_) <= T && memory_fits_by(dd_, T);
  }

  int64_t checks_left = kPairChecks;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();  // then out of checks

 private:
  const Problem& p_;
  const ItemSums& sums_;
  DeviceDemand dd_;
};

// The least T for which feasible(T) (1: some cut fits every device by T; 0: none; −1: out of
// checks), by bisection between lo and hi (a T every cut passes is needed only as an upper start:
// the partition p is cut to is one). Every T found impossible is a bound too, so when the checks
// run out the last of them stands. *possible_us: the least T found possible (hi if none was).
double bisect_pair_bound(double lo, double hi, const std::function<int(double)>& feasible, double* possible_us) {
  for (int k = 0; k < 40 && hi - lo > 1e-9 * hi; k++) {
    const double mid = (lo + hi) / 2;
    const int fits = feasible(mid);
    if (fits < 0) break;
    (fits ? hi : lo) = mid;
  }
  *possible_us = hi;
  return lo;
}

}  // namespace
namespace {

// What a pair bound is asked for beyond its bound: a time after which it stops (its bound then
// the last makespan found impossible, and no cut), and a cut (none when null).
struct PairRequest {
  std::chrono::steady_clock::time_point deadline;
  std::vector<int>* cut;
  const ScheduleRules& rules;
};

// The states (packed a·(L+1) + b) each device reached along the cuts, device by device, when a
// pair bound's last test is recorded.
using Levels = std::vector<std::vector<int>>;

// Walking back from the last device: at each, the state before it nearest lighter_first(p)'s
// (its boundaries after that device) among those from which the device fits by T. Items per
// stage; empty when a device finds none. A V-shape's device d holds [a, a2) and [b2, b) (the
// outer devices take its second stages from the end), an interleaved one's [a, a2) and [b, b2).
std::vector<int> walk_back(const Problem& p, PairCheck& check, double T, const Levels& levels, int start_state) {
  const int D = p.num_devices, S = p.num_stages(), L = static_cast<int>(p.layers.size());
  const bool vshape = p.placement == Placement::kVShape;
  auto second_stage = [&](int d) { return vshape ? S - 1 - d : D + d; };
  std::vector<int> before_stage(S + 1, 0);  // lighter_first(p)'s first item of each stage
  const std::vector<int> own = lighter_first(p);
  for (int k = 0; k < S; k++) before_stage[k + 1] = before_stage[k] + own[k];
  auto distance = [&](int d, int state) {  // to lighter_first(p)'s state after device d
    const int b_own = vshape ? before_stage[S - 1 - d] : before_stage[D + d + 1];
    return std::abs(state / (L + 1) - before_stage[d + 1]) + std::abs(state % (L + 1) - b_own);
  };
  std::vector<int> counts(S, 0), order;
  // Whether device d fits by T between the two states; if so, its two stages' counts.
  auto take = [&](int d, int before, int after) {
    const int a = before / (L + 1), b = before % (L + 1), a2 = after / (L + 1), b2 = after % (L + 1);
    const int lo = vshape ? b2 : b, hi = vshape ? b : b2;
    if (!(a < a2 && lo < hi) || !check.fits(d, d, a, a2, second_stage(d), lo, hi, T)) return false;
    counts[d] = a2 - a;
    counts[second_stage(d)] = hi - lo;
    return true;
  };
  auto nearest_first = [&](int d, const std::vector<int>& states) {
    order = states;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return distance(d, x) < distance(d, y); });
  };
  if (levels[D - 1].empty()) return {};
  nearest_first(D - 1, levels[D - 1]);
  int state = order[0];
  for (int d = D - 1; d > 0; d--) {
    nearest_first(d - 1, levels[d - 1]);
    const auto before = std::find_if(order.begin(), order.end(), [&](int x) { return take(d, x, state); });
    if (before == order.end()) return {};
    state = *before;
  }
  if (!take(0, start_state, state)) return {};
  return counts;
}

// The least T for which feasible(T), by bisection; with want.cut also the cut walked back from
// one more test 1% above the least T found possible, its states recorded into `levels` (the
// state before device 0 from start_state(), known once that test has passed).
double pair_bound(const Problem& p, PairCheck& check, double lo, double hi, const std::function<int(double)>& feasible,
                  Levels* levels, const std::function<int()>& start_state, const PairRequest& want) {
  double possible_us;
  const double bound = bisect_pair_bound(lo, hi, feasible, &possible_us);
  if (!want.cut) return bound;
  levels->assign(p.num_devices, {});
  check.checks_left = kPairChecks;
  possible_us *= 1 + kCutSlack;
  if (feasible(possible_us) == 1) *want.cut = walk_back(p, check, possible_us, *levels, start_state());
  return bound;
}

// A V-shape's device d holds stages d and 2D−1−d, nested: the outer devices take items from
// both ends. So at a makespan T, which cuts let every device's bound stay within T follows from
// outside in, state (d, a, b) = devices 0..d−1 hold items [0, a) and [b, L). A stage whose work
// alone passes T ends the search along it, which keeps the states few. With want.cut, also a
// cut (pair_bound).
double vshape_pair_bound(const Problem& p, const ItemSums& sums, double lo, double hi, const PairRequest& want) {
  const int D = p.num_devices, L = static_cast<int>(p.layers.size()), M = p.num_microbatches, S = p.num_stages();
  if (p.placement != Placement::kVShape || L < S || !(hi > lo)) return 0;
  PairCheck check(p, sums);
  check.deadline = want.deadline;
  std::vector<uint8_t> reach((L + 1) * (L + 1)), next(reach.size());
  Levels levels;  // recorded when not empty
  // 1: every device fits by T along some cut; 0: none does; -1: out of checks, unknown.
  auto feasible = [&](double T) {
    std::fill(reach.begin(), reach.end(), 0);
    reach[0 * (L + 1) + L] = 1;
    for (int d = 0; d < D; d++) {
      std::fill(next.begin(), next.end(), 0);
      const int inner = 2 * (D - 1 - d);  // items the inner devices need at least
      bool any = false;
      for (int a = 0; a <= L; a++)
        for (int b = a; b <= L; b++) {
          if (!reach[a * (L + 1) + b]) continue;
          for (int a2 = a + 1; a2 < b; a2++) {
            if (M * sums.work_us(a, a2) > T) break;
            // The last device's two stages meet: b2 = a2.
            for (int b2 = d == D - 1 ? a2 : b - 1; b2 >= a2 + inner && (d < D - 1 || b2 == a2); b2--) {
              if (M * (sums.work_us(a, a2) + sums.work_us(b2, b)) > T) break;
              if (check.checks_left <= 0) return -1;
              if (next[a2 * (L + 1) + b2] || !check.fits(d, d, a, a2, S - 1 - d, b2, b, T)) continue;
              next[a2 * (L + 1) + b2] = 1;
              if (!levels.empty()) levels[d].push_back(a2 * (L + 1) + b2);
              any = true;
            }
          }
        }
      if (!any) return 0;
      reach.swap(next);
    }
    return 1;
  };
  return pair_bound(
      p, check, lo, hi, feasible, &levels, [&] { return L; }, want);  // before device 0: (a, b) = (0, L)
}

// An interleaved placement of two chunks: device d holds stages d and D+d. The cuts follow
// device by device, state (a, b) = the first items of stages d and D+d, for each first item b0
// of stage D, where stage D−1 must end; the least T is found as for the V-shape, and the cut too,
// at the b0 nearest lighter_first(p)'s.
double interleaved_pair_bound(const Problem& p, const ItemSums& sums, double lo, double hi, const PairRequest& want) {
  const int D = p.num_devices, L = static_cast<int>(p.layers.size()), M = p.num_microbatches, S = p.num_stages();
  if (p.placement != Placement::kInterleaved || p.chunks_per_device != 2 || L < S || !(hi > lo)) return 0;
  PairCheck check(p, sums);
  check.deadline = want.deadline;
  const std::vector<int> own = lighter_first(p);
  int own_b0 = 0;
  for (int s = 0; s < D; s++) own_b0 += own[s];
  std::vector<int> b0s;
  for (int b0 = D; b0 <= L - D; b0++) b0s.push_back(b0);
  std::stable_sort(b0s.begin(), b0s.end(), [&](int x, int y) { return std::abs(x - own_b0) < std::abs(y - own_b0); });
  std::vector<std::pair<int, int>> reach, next;
  std::vector<uint8_t> seen((L + 1) * (L + 1));
  Levels levels;  // recorded when not empty
  int found_b0 = -1;
  auto feasible = [&](double T) {
    for (int b0 : b0s) {
      reach.assign(1, {0, b0});
      for (int d = 0; d < D && !reach.empty(); d++) {
        next.clear();
        const bool last = d == D - 1;
        // Each later stage of either chunk needs an item at least.
        const int a2_max = last ? b0 : b0 - (D - 1 - d), b2_max = last ? L : L - (D - 1 - d);
        for (const auto& [a, b] : reach)
          for (int a2 = last ? b0 : a + 1; a2 <= a2_max; a2++) {
            if (M * sums.work_us(a, a2) > T) break;
            for (int b2 = last ? L : b + 1; b2 <= b2_max; b2++) {
              if (M * (sums.work_us(a, a2) + sums.work_us(b, b2)) > T) break;
              if (check.checks_left <= 0) return -1;
              if (seen[a2 * (L + 1) + b2] || !check.fits(d, d, a, a2, D + d, b, b2, T)) continue;
              seen[a2 * (L + 1) + b2] = 1;
              next.push_back({a2, b2});
            }
          }
        for (const auto& [a2, b2] : next) seen[a2 * (L + 1) + b2] = 0;
        reach.swap(next);
        if (!levels.empty()) {
          levels[d].clear();
          for (const auto& [a2, b2] : reach) levels[d].push_back(a2 * (L + 1) + b2);
        }
      }
      if (!reach.empty()) {
        found_b0 = b0;
        return 1;
      }
    }
    return 0;
  };
  return pair_bound(
      p, check, lo, hi, feasible, &levels, [&] { return found_b0; }, want);  // before device 0: (0, b0)
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

}  // namespace

namespace {

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
