#include "families/v_building_block.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <tuple>

#include "families/common.h"

namespace optpipe {
namespace {

// Slot lists per device: [device][type][microbatch] → slot. Types: 0 F of chunk 0, 1 F of
// chunk 1, 2 B of chunk 1, 3 B of chunk 0, then the W's: 4 (all W, or W of chunk 1 when split)
// and 5 (W of chunk 0, when split).
using Slots = std::vector<std::vector<int>>;  // one device
using AllSlots = std::vector<Slots>;

constexpr int kNone = std::numeric_limits<int>::max();

int last_slot(const Slots& sch) {
  int bound = 0;
  for (const auto& t : sch)
    if (!t.empty()) bound = std::max(bound, t.back());
  return bound;
}

// The list (type) whose next unconsumed slot is smallest, ties to the lower type.
int next_type(const Slots& sch, const std::vector<int>& pos, int num_types, int* slot) {
  int best = -1;
  *slot = kNone;
  for (int t = 0; t < num_types; t++) {
    const int s = pos[t] < static_cast<int>(sch[t].size()) ? sch[t][pos[t]] : kNone;
    if (s < *slot) {
      *slot = s;
      best = t;
    }
  }
  return best;
}

// Puts one W (per B) into the empty slots after the B's, the rest after the last slot.
void put_w(Slots& sch, bool split) {
  const int bound = last_slot(sch);
  sch.resize(split ? 6 : 5);
  int pending[2] = {0, 0};
  std::vector<int> pos(4, 0);
  int i = 0;
  for (i = 0; i <= bound; i++) {
    int slot;
    const int ty = next_type(sch, pos, 4, &slot);
    if (slot == i) {
      pos[ty]++;
      if (ty >= 2) pending[split ? ty - 2 : 0]++;
    } else {
      for (int w = 0; w < 2; w++)
        if (pending[w]) {
          sch[4 + w].push_back(i);
          pending[w]--;
          break;
        }
    }
  }
  i = bound;
  for (int w = 0; w < 2; w++)
    while (pending[w] > 0) {
      sch[4 + w].push_back(++i);
      pending[w]--;
    }
}

// Live activations of one device after each slot 0..last: F +1, W −1 (an empty slot retires a
// pending W when the W's are not placed yet). `at(i, live)` is called per slot.
template <class At>
void memory_walk(const Slots& sch, At at) {
  const int num_types = static_cast<int>(sch.size());
  const bool has_w = num_types > 4;
  const int bound = last_slot(sch);
  std::vector<int> pos(num_types, 0);
  int pending_w = 0, cur = 0;
  for (int i = 0; i <= bound; i++) {
    int slot;
    const int ty = next_type(sch, pos, num_types, &slot);
    if (slot == i) {
      pos[ty]++;
      if (ty <= 1) cur++;
      if (ty >= 4) cur--;
      if (ty == 2 || ty == 3) pending_w++;
    } else if (!has_w && pending_w) {
      cur--;
      pending_w--;
    }
    at(i, cur);
  }
}

int peak_memory(const Slots& sch) {
  int peak = 0;
  memory_walk(sch, [&](int, int live) { peak = std::max(peak, live); });
  return peak;
}

// A device's memory curve (live activations after each slot) under range adds, with range
// maxima: a segment tree with lazy adds.
class CurveTree {
 public:
  explicit CurveTree(const std::vector<int>& curve)
      : n_(static_cast<int>(curve.size())), max_(4 * n_), add_(4 * n_, 0) {
    build(1, 0, n_ - 1, curve);
  }
  void add(int l, int r, int v) { update(1, 0, n_ - 1, l, r, v); }
  int max(int l, int r) const { return l > r ? std::numeric_limits<int>::min() : query(1, 0, n_ - 1, l, r); }
  int at(int i) const { return max(i, i); }

 private:
  void build(int x, int lo, int hi, const std::vector<int>& c) {
    if (lo == hi) {
      max_[x] = c[lo];
      return;
    }
    const int mid = (lo + hi) / 2;
    build(2 * x, lo, mid, c);
    build(2 * x + 1, mid + 1, hi, c);
    max_[x] = std::max(max_[2 * x], max_[2 * x + 1]);
  }
  void update(int x, int lo, int hi, int l, int r, int v) {
    if (r < lo || hi < l) return;
    if (l <= lo && hi <= r) {
      max_[x] += v;
      add_[x] += v;
      return;
    }
    const int mid = (lo + hi) / 2;
    update(2 * x, lo, mid, l, r, v);
    update(2 * x + 1, mid + 1, hi, l, r, v);
    max_[x] = std::max(max_[2 * x], max_[2 * x + 1]) + add_[x];
  }
  int query(int x, int lo, int hi, int l, int r) const {
    if (r < lo || hi < l) return std::numeric_limits<int>::min();
    if (l <= lo && hi <= r) return max_[x];
    const int mid = (lo + hi) / 2;
    return std::max(query(2 * x, lo, mid, l, r), query(2 * x + 1, mid + 1, hi, l, r)) + add_[x];
  }
  int n_;
  std::vector<int> max_, add_;
};

CurveTree curve_tree(const Slots& sch) {
  std::vector<int> curve(last_slot(sch) + 1);
  memory_walk(sch, [&](int i, int live) { curve[i] = live; });
  return CurveTree(curve);
}

// The first free slot in [from, to) where element (ty, mb) of device schedule `sch`, now at slot
// `to`, can go without raising the peak past `cap`; −1 if none. With the W's placed, moving an
// element earlier shifts the curve by its ±1 on [slot, to) only, so the device's curve (kept by
// the caller in `curve`) answers every candidate; without them (pending W's retire in empty
// slots), or for the device's last element, each candidate is walked.
int earliest_free_slot(Slots& sch, int ty, int mb, int from, int to, const std::vector<char>& occupied, int cap,
                       const CurveTree* curve) {
  while (from < to && occupied[from]) from++;  // no free slot, no curve to look at
  if (from >= to) return -1;
  const bool has_w = sch.size() > 4;
  const int bound = last_slot(sch);
  if (!has_w || to == bound || !curve) {
    for (int pt = from; pt < to; pt++) {
      if (occupied[pt]) continue;
      sch[ty][mb] = pt;
      const bool fits = peak_memory(sch) <= cap;
      sch[ty][mb] = to;
      if (fits) return pt;
    }
    return -1;
  }
  // The peak with the element at pt: the curve before pt, over [pt, to) shifted by its ±1, after.
  // What lies before only grows with pt, so once it passes the cap no later slot can do.
  const int delta = ty <= 1 ? 1 : ty >= 4 ? -1 : 0;
  const int after = curve->max(to, bound);
  if (after > cap) return -1;
  int before = std::max(0, curve->max(0, from - 1));
  for (int pt = from; pt < to && before <= cap; before = std::max(before, curve->at(pt)), pt++) {
    if (occupied[pt]) continue;
    const int peak = std::max({before, curve->max(pt, to - 1) + delta, after});
    if (peak <= cap) return pt;
  }
  return -1;
}

struct Key {
  int slot, device, type, mb;
  bool operator<(const Key& o) const {
    return std::tie(slot, device, type, mb) < std::tie(o.slot, o.device, o.type, o.mb);
  }
  bool operator>(const Key& o) const { return o < *this; }
};

// Walks every element in (slot, device, type, mb) order, calling visit(device, type, mb): a
// merge of the (device, type) lists, each in its own order, through a heap of their heads.
template <class Visit>
void walk(const AllSlots& sr, Visit visit) {
  const int S = static_cast<int>(sr.size());
  const int nt = static_cast<int>(sr[0].size());
  std::priority_queue<Key, std::vector<Key>, std::greater<>> heads;
  auto push = [&](int d, int t, int m) {
    if (m < static_cast<int>(sr[d][t].size())) heads.push(Key{sr[d][t][m], d, t, m});
  };
  for (int d = 0; d < S; d++)
    for (int t = 0; t < nt; t++) push(d, t, 0);
  while (!heads.empty()) {
    const Key k = heads.top();
    heads.pop();
    push(k.device, k.type, k.mb + 1);
    visit(k.device, k.type, k.mb);
  }
}

// Places every element as early as its dependencies allow, in slot order, with unit costs;
// returns the start times as the new slots, and the per-device order.
AllSlots squeeze(const AllSlots& sr, std::vector<std::vector<std::pair<int, int>>>* order) {
  const int S = static_cast<int>(sr.size());
  const int nt = static_cast<int>(sr[0].size());
  std::vector<std::vector<std::vector<int>>> end(S, std::vector<std::vector<int>>(nt));
  for (int d = 0; d < S; d++)
    for (int t = 0; t < nt; t++) end[d][t].assign(sr[d][t].size(), 0);
  std::vector<int> device_free(S, 0);
  if (order) order->assign(S, {});
  walk(sr, [&](int d, int ty, int mb) {
    int t = device_free[d];
    if ((ty == 0 || ty == 2) && d > 0) t = std::max(t, end[d - 1][ty][mb]);
    if ((ty == 1 || ty == 3) && d + 1 < S) t = std::max(t, end[d + 1][ty][mb]);
    if (ty > 0 && ty < 4) t = std::max(t, end[d][ty - 1][mb]);
    if (mb > 0) t = std::max(t, end[d][ty][mb - 1]);
    end[d][ty][mb] = t + 1;
    device_free[d] = t + 1;
    if (order) (*order)[d].push_back({ty, mb});
  });
  AllSlots out = sr;
  for (int d = 0; d < S; d++)
    for (int t = 0; t < nt; t++)
      for (size_t m = 0; m < sr[d][t].size(); m++) out[d][t][m] = end[d][t][m] - 1;
  return out;
}

// Moves elements to earlier free slots where dependencies and the current peak allow.
AllSlots reorder(AllSlots sr, bool consider_w) {
  if (consider_w)
    for (Slots& s : sr) put_w(s, false);
  const int S = static_cast<int>(sr.size());
  int cur_peak = 0;
  for (const Slots& s : sr) cur_peak = std::max(cur_peak, peak_memory(s));
  std::vector<std::vector<char>> occupied(S);
  for (int d = 0; d < S; d++) occupied[d].assign(last_slot(sr[d]) + 1, 0);
  const int num_mb = static_cast<int>(sr[0][0].size());
  int phase = 0;
  // An element's slot changes only when the walk reaches it, so the walk order can be taken
  // up front from the initial slots.
  std::vector<Key> keys;
  walk(sr, [&](int d, int ty, int mb) { keys.push_back({sr[d][ty][mb], d, ty, mb}); });
  // Per device, its B slots (both types) in order, kept until one of them moves; and with the W's
  // placed, its memory curve.
  std::vector<std::vector<int>> b_slots(S);
  std::vector<char> b_stale(S, 1);
  std::vector<std::optional<CurveTree>> curves(S);
  for (const Key& k : keys) {
    const int d = k.device, ty = k.type, mb = k.mb, tm = k.slot;
    if (ty == 3 && d == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (ty == 0 && mb == num_mb - 1) phase = 2;
      occupied[d][tm] = 1;
      continue;
    }
    if (phase == 0 && !consider_w) {
      occupied[d][tm] = 1;
      continue;
    }
    int dep = -1;
    if ((ty == 0 || ty == 2) && d > 0) dep = std::max(dep, sr[d - 1][ty][mb]);
    if ((ty == 1 || ty == 3) && d + 1 < S) dep = std::max(dep, sr[d + 1][ty][mb]);
    if (ty > 0 && ty < 4) dep = std::max(dep, sr[d][ty - 1][mb]);
    if (ty == 4) {
      std::vector<int>& bs = b_slots[d];
      if (b_stale[d]) {
        bs = sr[d][2];
        bs.insert(bs.end(), sr[d][3].begin(), sr[d][3].end());
        std::sort(bs.begin(), bs.end());
        b_stale[d] = 0;
      }
      dep = std::max(dep, bs[mb]);
    }
    if (mb > 0) dep = std::max(dep, sr[d][ty][mb - 1]);
    dep++;
    if (consider_w && !curves[d]) curves[d] = curve_tree(sr[d]);
    const int pt = earliest_free_slot(sr[d], ty, mb, dep, tm, occupied[d], cur_peak, curves[d] ? &*curves[d] : nullptr);
    sr[d][ty][mb] = pt >= 0 ? pt : tm;
    occupied[d][sr[d][ty][mb]] = 1;
    if (pt >= 0 && curves[d]) curves[d]->add(pt, tm - 1, ty <= 1 ? 1 : ty >= 4 ? -1 : 0);
    if (pt >= 0 && (ty == 2 || ty == 3)) b_stale[d] = 1;
  }
  if (!consider_w)
    for (Slots& s : sr) put_w(s, false);
  return squeeze(sr, nullptr);
}

}  // namespace

Result<Schedule> make_v_building_block(const Problem& p, VMemory setup, const char* family) {
  Status st = require_placement(p, family, Placement::kVShape, 2);
  if (!st.ok()) return Result<Schedule>::Error(st);
  const int D = p.num_devices, M = p.num_microbatches;

  // One building block: the first microbatch's four slots per device; microbatch k adds 6k.
  AllSlots sr(D, Slots(4));
  for (int i = 0; i < D; i++) {
    int base[4];
    if (setup == VMemory::kMin) {
      const int iv = D % 3 == 0 ? 2 : 0;
      const int b[4] = {i, 2 * D - i - 1, 2 * D + iv + i, 4 * D + iv - i - 1};
      std::copy(b, b + 4, base);
    } else {
      const int iv = D % 2 == 0 ? 3 : 0;
      const int b[4] = {2 * i, 3 * D - i - 2, 3 * D + iv + 2 * i - 1, 6 * D + iv - i - 2};
      std::copy(b, b + 4, base);
    }
    for (int t = 0; t < 4; t++)
      for (int k = 0; k < M; k++) sr[i][t].push_back(base[t] + 6 * k);
  }

  AllSlots r1 = reorder(sr, true);
  for (Slots& s : r1) s.resize(4);
  AllSlots r2 = reorder(r1, false);
  for (Slots& s : r2) {
    s.resize(4);
    put_w(s, true);
  }
  std::vector<std::vector<std::pair<int, int>>> order;
  squeeze(r2, &order);

  Schedule out = empty_schedule(p);
  for (int d = 0; d < D; d++) {
    for (auto [ty, mb] : order[d]) {
      // Types 0/1 are forwards of chunk 0/1; 2/3 input-gradient B of chunk 1/0; 4/5 their W.
      const int cat = ty / 2, ch = ty % 2;
      const int chunk = cat == 0 ? ch : 1 - ch;
      const int stage = chunk == 0 ? d : 2 * D - 1 - d;
      const OpKind kind = cat == 0 ? OpKind::kF : cat == 1 ? OpKind::kB : OpKind::kW;
      out.devices[d].compute.push_back(Op{kind, stage, mb});
    }
  }
  return Result<Schedule>::Of(std::move(out));
}

}  // namespace optpipe
