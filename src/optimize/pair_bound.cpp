// The V-shape's and two interleaved chunks' pair bounds and the cuts they point to.
#include "optimize/pair_bound.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "optimize/device_demand.h"
#include "optimize/partition.h"

namespace optpipe {

namespace {

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

}  // namespace

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

}  // namespace optpipe
