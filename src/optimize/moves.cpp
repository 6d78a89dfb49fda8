// The local search's moves: compute ops reordered, backwards split or fused, activations kept,
// offloaded or recomputed, reloads issued earlier or later, W's deferred in the cool-down.
#include "optimize/moves.h"

#include <algorithm>
#include <cstdint>

namespace optpipe {

namespace {

// Does `y` need `x` to come first on the same compute stream?
bool needs(const Op& y, const Op& x) {
  if (x.microbatch != y.microbatch) return false;
  const bool y_back = y.kind == OpKind::kB || y.kind == OpKind::kBW;
  const bool x_back = x.kind == OpKind::kB || x.kind == OpKind::kBW;
  if (x.stage == y.stage) {
    if (x.kind == OpKind::kF) return y.kind != OpKind::kF;
    if (x.kind == OpKind::kR) return y_back || y.kind == OpKind::kW;
    if (x.kind == OpKind::kB) return y.kind == OpKind::kW;
    return false;
  }
  if (x.kind == OpKind::kF && y.kind == OpKind::kF) return x.stage == y.stage - 1;
  if (x_back && y_back) return x.stage == y.stage + 1;
  return false;
}

}  // namespace

std::vector<int> window_repeats(const std::vector<Op>& ops, int lo, int hi, int num_microbatches) {
  std::vector<int> offsets;
  const int n = static_cast<int>(ops.size()), width = hi - lo;
  auto matches = [&](int t, int k) {
    for (int u = 0; u <= width; u++) {
      const Op& a = ops[lo + u];
      if (!(ops[t + u] == Op{a.kind, a.stage, a.microbatch + k})) return false;
    }
    return true;
  };
  for (const int dir : {1, -1}) {
    int prev_lo = lo, prev_hi = hi;
    for (int k = dir;; k += dir) {
      const Op first{ops[lo].kind, ops[lo].stage, ops[lo].microbatch + k};
      if (first.microbatch < 0 || first.microbatch >= num_microbatches) break;
      // The next window lies wholly past the last one (before it, going back).
      int t = -1;
      if (dir > 0) {
        for (int u = prev_hi + 1; u + width < n && t < 0; u++)
          if (ops[u] == first) t = u;
      } else {
        for (int u = prev_lo - 1 - width; u >= 0 && t < 0; u--)
          if (ops[u] == first) t = u;
      }
      if (t < 0 || !matches(t, k)) break;
      offsets.push_back(t - lo);
      prev_lo = t;
      prev_hi = t + width;
    }
  }
  return offsets;
}

class Mover::Impl {
 public:
  Impl(const Problem& p, const ScheduleRules& rules, std::mt19937_64& rng)
      : p_(p), rules_(rules), rng_(rng), split_(num_op_ids(p), 0), pos_(num_op_ids(p), -1) {}

  // Applies one random move to s; false if the move found nothing to do. One in five of the moves
  // that reorder, recompute, offload or re-anchor is tiled: made alike in every period of the
  // device's steady state around the op picked (at large M one period changed alone seldom moves
  // the makespan; all of them together change the repeating unit).
  bool random_move(Schedule& s) {
    if (pick(100) < 3) return split_cooldown(s);
    const int d = pick(p_.num_devices);
    DeviceSchedule& ds = s.devices[d];
    if (pick(100) < 8) return defer_ws(ds);
    const int kind = pick(100);
    tile_ = pick(100) < kTiledPercent;
    if (kind < 55) return move_compute(ds);
    if (kind < 65) return split_or_fuse(ds);
    if (kind < 80) return rules_.recompute && toggle_recompute(ds);
    if (kind < 92) return rules_.offload && toggle_offload(ds);
    return shift_anchor(ds);
  }

 private:
  static constexpr int kTiledPercent = 20;

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  // Positions in one compute list by op id, for a tiled move's reads (−1: not in it); cleared by
  // unindex() before the list is edited.
  void index(const std::vector<Op>& ops) {
    for (size_t k = 0; k < ops.size(); k++) pos_[op_id(p_, ops[k])] = static_cast<int>(k);
  }
  void unindex(const std::vector<Op>& ops) {
    for (const Op& op : ops) pos_[op_id(p_, op)] = -1;
  }
  int pos(OpKind kind, int stage, int mb) const { return pos_[op_id(p_, Op{kind, stage, mb})]; }
  int backward_pos(int stage, int mb) const {
    return std::max(pos(OpKind::kB, stage, mb), pos(OpKind::kBW, stage, mb));
  }
  // The microbatches next to mb, up and down, while `same` holds for each: the periods a tiled
  // move repeats its change in.
  template <class Same>
  std::vector<int> run_around(int mb, Same same) const {
    std::vector<int> out;
    for (int k = mb + 1; k < p_.num_microbatches && same(k); k++) out.push_back(k);
    for (int k = mb - 1; k >= 0 && same(k); k--) out.push_back(k);
    return out;
  }
  std::vector<uint8_t> offloaded_of_stage(const DeviceSchedule& ds, int stage) const {
    std::vector<uint8_t> out(p_.num_microbatches, 0);
    for (const Op& o : ds.offloads)
      if (o.stage == stage) out[o.microbatch] = 1;
    return out;
  }

  // Moves one compute op a few places, never across an op it depends on or that depends on it.
  bool move_compute(DeviceSchedule& ds) {
    std::vector<Op>& ops = ds.compute;
    if (ops.size() < 2) return false;
    const int i = pick(static_cast<int>(ops.size()));
    const int reach = 1 + pick(pick(4) == 0 ? 16 : 4);
    const int j = std::clamp(i + (pick(2) ? reach : -reach), 0, static_cast<int>(ops.size()) - 1);
    if (i == j) return false;
    const Op op = ops[i];
    if (j < i) {
      for (int k = j; k < i; k++)
        if (needs(op, ops[k])) return false;
    } else {
      for (int k = i + 1; k <= j; k++)
        if (needs(ops[k], op)) return false;
    }
    // Tiled: the same window elsewhere holds the same ops k microbatches on, so the same move
    // keeps their dependencies too; the windows do not overlap, so no move shifts another's.
    std::vector<int> offsets{0};
    if (tile_) {
      const std::vector<int> more = window_repeats(ops, std::min(i, j), std::max(i, j), p_.num_microbatches);
      offsets.insert(offsets.end(), more.begin(), more.end());
    }
    for (const int o : offsets) {
      const Op moved = ops[i + o];
      ops.erase(ops.begin() + i + o);
      ops.insert(ops.begin() + j + o, moved);
    }
    return true;
  }

  // BW → B now and W later on; or B … W → BW where the B was.
  bool split_or_fuse(DeviceSchedule& ds) {
    std::vector<Op>& ops = ds.compute;
    const int i = pick(static_cast<int>(ops.size()));
    const Op op = ops[i];
    if (op.kind == OpKind::kBW) {
      ops[i].kind = OpKind::kB;
      rename_in_reloads(ds, op, ops[i]);
      const int j = i + 1 + pick(std::min<int>(8, static_cast<int>(ops.size()) - i));
      ops.insert(ops.begin() + std::min<int>(j, static_cast<int>(ops.size())), Op{OpKind::kW, op.stage, op.microbatch});
      return true;
    }
    if (op.kind == OpKind::kB) {
      const Op w{OpKind::kW, op.stage, op.microbatch};
      ops[i].kind = OpKind::kBW;
      rename_in_reloads(ds, op, ops[i]);
      rename_in_reloads(ds, w, ops[i]);
      ops.erase(ops.begin() + find_op(ops, w));
      return true;
    }
    return false;
  }

  // On every device at once, its last k fused backwards split, each W moved after the device's
  // next `later` backwards (the last ones' at the end): the last microbatches' backwards then
  // cross the pipeline a W sooner per stage, where one split at a time moves a single link of
  // that chain (zero-bubble's cool-down).
  bool split_cooldown(Schedule& s) {
    const int k = 1 + pick(std::max(1, p_.num_microbatches / 2)), later = 1 + pick(3);
    bool any = false;
    for (DeviceSchedule& ds : s.devices) {
      std::vector<Op>& ops = ds.compute;
      const size_t first = defer_cooldown_ws(ops, k, later, /*split_fused=*/true);
      if (first == ops.size()) continue;
      any = true;
      // Reloads that name a split BW name its B now (one pass, not one per split).
      for (size_t i = first; i < ops.size(); i++)
        if (ops[i].kind == OpKind::kB) split_[op_id(p_, Op{OpKind::kBW, ops[i].stage, ops[i].microbatch})] = 1;
      auto renamed = [&](Op& x) {
        if (x.kind == OpKind::kBW && split_[op_id(p_, x)]) x.kind = OpKind::kB;
      };
      for (ReloadEntry& r : ds.reloads) {
        renamed(r.anchor);
        for (Op& x : r.after) renamed(x);
      }
      for (size_t i = first; i < ops.size(); i++)
        if (ops[i].kind == OpKind::kB) split_[op_id(p_, Op{OpKind::kBW, ops[i].stage, ops[i].microbatch})] = 0;
    }
    return any;
  }

  // On one device, its W's from its k-th last backward on each moved after its next `later`
  // backwards. A bottleneck device then runs its last backwards as their chains arrive and fills
  // the chain after its last one with W's, which W's moved one at a time seldom find: the
  // makespan moves only once all of them are out of the way.
  bool defer_ws(DeviceSchedule& ds) {
    const int k = 1 + pick(std::max(1, p_.num_microbatches / 2)), later = 1 + pick(4);
    return defer_cooldown_ws(ds.compute, k, later, /*split_fused=*/false) < ds.compute.size();
  }

  // Takes out the recompute at compute[r]; reloads issued at it are issued at the op after it.
  static void erase_recompute(DeviceSchedule& ds, int r) {
    const Op recompute = ds.compute[r];
    ds.compute.erase(ds.compute.begin() + r);
    if (r < static_cast<int>(ds.compute.size())) rename_in_reloads(ds, recompute, ds.compute[r]);
  }

  bool offloaded(const DeviceSchedule& ds, const Op& f) const {
    return find_op(ds.offloads, Op{OpKind::kOffload, f.stage, f.microbatch}) >= 0;
  }

  // Recompute F(s,i) right before its backward (instead of offloading it, if it was), or stop
  // recomputing it. The swap is one move: dropping the offload alone first would overflow.
  bool toggle_recompute(DeviceSchedule& ds) {
    std::vector<Op>& ops = ds.compute;
    const int i = pick(static_cast<int>(ops.size()));
    const Op op = ops[i];
    if (rules_.whole_stage_recompute) return toggle_stage_recompute(ds, op);
    if (tile_) return tile_recompute(ds, op);
    if (op.kind == OpKind::kR) {
      erase_recompute(ds, i);
      return true;
    }
    if (op.kind != OpKind::kB && op.kind != OpKind::kBW) return false;
    const Op r{OpKind::kR, op.stage, op.microbatch};
    if (find_op(ops, r) >= 0) return false;
    if (offloaded(ds, op)) remove_offload(ds, op.stage, op.microbatch);  // its WAIT, if any, goes too
    ops.insert(ops.begin() + backward_index(ops, op.stage, op.microbatch), r);
    return true;
  }

  // Tiled: recompute (or stop recomputing) every kept activation of the stage whose forward and
  // backward sit as far apart as op's, in the periods around it. Offloaded ones are left alone.
  bool tile_recompute(DeviceSchedule& ds, const Op& op) {
    const bool is_r = op.kind == OpKind::kR;
    if (!is_r && op.kind != OpKind::kB && op.kind != OpKind::kBW) return false;
    const int s = op.stage, m = op.microbatch;
    const std::vector<uint8_t> offloaded = offloaded_of_stage(ds, s);
    if (offloaded[m] || (!is_r && find_op(ds.compute, Op{OpKind::kR, s, m}) >= 0)) return false;
    index(ds.compute);
    auto from = [&](int k) { return is_r ? pos(OpKind::kR, s, k) : pos(OpKind::kF, s, k); };
    const int span = backward_pos(s, m) - from(m);
    // (position, microbatch), edited from the last position back so that no edit moves another.
    std::vector<std::pair<int, int>> at;
    auto add = [&](int k) { at.push_back({is_r ? pos(OpKind::kR, s, k) : backward_pos(s, k), k}); };
    add(m);
    for (const int k : run_around(m, [&](int k) {
           return !offloaded[k] && from(k) >= 0 && backward_pos(s, k) - from(k) == span &&
                  (is_r || pos(OpKind::kR, s, k) < 0);
         }))
      add(k);
    unindex(ds.compute);
    std::sort(at.rbegin(), at.rend());
    for (const auto& [where, k] : at) {
      if (is_r)
        erase_recompute(ds, where);
      else
        ds.compute.insert(ds.compute.begin() + where, Op{OpKind::kR, s, k});
    }
    return true;
  }

  // With whole-stage recompute: the stage of `op` stops recomputing, or recomputes every
  // microbatch (none of them offloaded).
  bool toggle_stage_recompute(DeviceSchedule& ds, const Op& op) {
    std::vector<Op>& ops = ds.compute;
    if (op.kind == OpKind::kR) {
      std::erase_if(ops, [&](const Op& x) { return x.kind == OpKind::kR && x.stage == op.stage; });
      return true;
    }
    if (op.kind != OpKind::kB && op.kind != OpKind::kBW) return false;
    for (int i = 0; i < p_.num_microbatches; i++)
      if (offloaded(ds, Op{OpKind::kF, op.stage, i}) || find_op(ops, Op{OpKind::kR, op.stage, i}) >= 0) return false;
    for (int i = 0; i < p_.num_microbatches; i++)
      ops.insert(ops.begin() + backward_index(ops, op.stage, i), Op{OpKind::kR, op.stage, i});
    return true;
  }

  // Offload F(s,i)'s activation (instead of recomputing it, if it was), reloaded a few ops
  // before its backward; or keep it again.
  bool toggle_offload(DeviceSchedule& ds) {
    std::vector<Op>& ops = ds.compute;
    int i = pick(static_cast<int>(ops.size()));
    const Op op = ops[i];
    if (op.kind != OpKind::kB && op.kind != OpKind::kBW) return false;
    if (tile_) return tile_offload(ds, op);
    if (offloaded(ds, op)) {
      remove_offload(ds, op.stage, op.microbatch);
      return true;
    }
    if (const int r = find_op(ops, Op{OpKind::kR, op.stage, op.microbatch}); r >= 0) {
      if (rules_.whole_stage_recompute) return false;  // a stage recomputes all or none
      erase_recompute(ds, r);
      if (r < i) i--;
    }
    const int f = find_op(ops, Op{OpKind::kF, op.stage, op.microbatch});
    if (i - f < 2) return false;  // nothing in between to overlap the transfers with
    insert_offload(ds, op.stage, op.microbatch, std::max(f + 1, i - 1 - pick(std::min(8, i - f - 1))));
    return true;
  }

  // Tiled: offload (or keep again) every kept activation of the stage whose forward and backward
  // sit as far apart as those of `backward`, in the periods around it, each reloaded as many ops
  // before its backward. Recomputed ones are left alone.
  bool tile_offload(DeviceSchedule& ds, const Op& backward) {
    const int s = backward.stage, m = backward.microbatch;
    const std::vector<uint8_t> offloaded = offloaded_of_stage(ds, s);
    index(ds.compute);
    const int span = backward_pos(s, m) - pos(OpKind::kF, s, m);
    std::vector<int> mbs = run_around(m, [&](int k) {
      return offloaded[k] == offloaded[m] && pos(OpKind::kR, s, k) < 0 && pos(OpKind::kF, s, k) >= 0 &&
             backward_pos(s, k) - pos(OpKind::kF, s, k) == span;
    });
    mbs.push_back(m);
    std::vector<OffloadAt> adds;
    if (!offloaded[m] && pos(OpKind::kR, s, m) < 0 && span >= 2) {
      const int lead = 1 + pick(std::min(8, span - 1));
      for (const int k : mbs) adds.push_back({s, k, ds.compute[backward_pos(s, k) - lead]});
    }
    unindex(ds.compute);
    if (offloaded[m]) {
      for (const int k : mbs) remove_offload(ds, s, k);
      return true;
    }
    insert_offloads(ds, adds);
    return !adds.empty();
  }

  // Issue a reload a little earlier or later.
  bool shift_anchor(DeviceSchedule& ds) {
    if (ds.reloads.empty()) return false;
    if (tile_) return tile_anchor(ds);
    ReloadEntry& r = ds.reloads[pick(static_cast<int>(ds.reloads.size()))];
    const int a = find_op(ds.compute, r.anchor);
    const int b = backward_index(ds.compute, r.reload.stage, r.reload.microbatch);
    const int to = a + (pick(2) ? 1 + pick(3) : -1 - pick(3));
    if (to < 0 || to >= b) return false;
    r.anchor = ds.compute[to];
    return true;
  }

  // Tiled: every reload of the stage issued as many ops before its backward as the one picked,
  // in the periods around it, moves alike.
  bool tile_anchor(DeviceSchedule& ds) {
    const ReloadEntry& picked = ds.reloads[pick(static_cast<int>(ds.reloads.size()))];
    const int s = picked.reload.stage, m = picked.reload.microbatch;
    const int shift = pick(2) ? 1 + pick(3) : -1 - pick(3);
    std::vector<int> entry(p_.num_microbatches, -1);  // by microbatch: its reload in ds.reloads
    for (size_t e = 0; e < ds.reloads.size(); e++)
      if (ds.reloads[e].reload.stage == s) entry[ds.reloads[e].reload.microbatch] = static_cast<int>(e);
    index(ds.compute);
    auto lead = [&](int k) { return backward_pos(s, k) - pos_[op_id(p_, ds.reloads[entry[k]].anchor)]; };
    const int lead_m = lead(m);
    std::vector<std::pair<int, Op>> moves;  // (reload entry, its new anchor)
    auto add = [&](int k) {
      const int to = backward_pos(s, k) - lead_m + shift;
      if (to >= 0 && to < backward_pos(s, k)) moves.push_back({entry[k], ds.compute[to]});
    };
    add(m);
    for (const int k : run_around(m, [&](int k) { return entry[k] >= 0 && lead(k) == lead_m; })) add(k);
    unindex(ds.compute);
    for (const auto& [e, anchor] : moves) ds.reloads[e].anchor = anchor;
    return !moves.empty();
  }

  const Problem& p_;
  const ScheduleRules& rules_;
  std::mt19937_64& rng_;
  std::vector<uint8_t> split_;  // by op id: a BW split_cooldown has just split (cleared after)
  std::vector<int> pos_;        // by op id: see index()
  bool tile_ = false;           // this move is tiled
};

Mover::Mover(const Problem& p, const ScheduleRules& rules, std::mt19937_64& rng)
    : impl_(std::make_unique<Impl>(p, rules, rng)) {}
Mover::~Mover() = default;
bool Mover::random_move(Schedule& s) { return impl_->random_move(s); }

size_t defer_cooldown_ws(std::vector<Op>& ops, int k, int later, bool split_fused) {
  const OpKind from_kind = split_fused ? OpKind::kBW : OpKind::kB;
  size_t first = ops.size();
  for (size_t i = ops.size(), n = 0; i-- > 0 && static_cast<int>(n) < k;)
    if (ops[i].kind == from_kind) {
      first = i;
      n++;
    }
  if (first == ops.size()) return first;
  std::vector<Op> out(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(first));
  std::vector<std::pair<Op, int>> pending;  // a W, and the backwards still to pass
  for (size_t i = first; i < ops.size(); i++) {
    Op op = ops[i];
    if (!split_fused && op.kind == OpKind::kW) {
      pending.push_back({op, later});
      continue;
    }
    const bool backward = op.kind == OpKind::kB || op.kind == OpKind::kBW;
    if (split_fused && op.kind == OpKind::kBW) op.kind = OpKind::kB;
    out.push_back(op);
    if (!backward) continue;
    for (auto& [w, left] : pending)
      if (--left == 0) out.push_back(w);
    std::erase_if(pending, [](const auto& w) { return w.second == 0; });
    if (split_fused && ops[i].kind == OpKind::kBW) pending.push_back({Op{OpKind::kW, op.stage, op.microbatch}, later});
  }
  for (const auto& w : pending) out.push_back(w.first);
  const bool moved = out != ops;
  ops.swap(out);
  return moved ? first : ops.size();
}

}  // namespace optpipe
