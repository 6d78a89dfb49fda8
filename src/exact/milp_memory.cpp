// The MILP's memory rows: at every allocation and every reload, what everything ordered before
// the check has applied, within the budget.
#include "exact/milp_builder.h"

namespace optpipe::milp_build {

namespace {

// For a memory check at time column `at`, two binaries on offloadable activation j: `gone` = 1
// only where j is offloaded and its offload ended by then, `back` = 1 wherever its reload started
// by then.
std::pair<int, int> gone_and_back(Builder& mb, int j, int at) {
  MilpModel& m = mb.m;
  const double horizon = mb.horizon_us;
  const int gone = add_col(mb, 0, 1, 0, true), back = add_col(mb, 0, 1, 0, true);
  m.rows.push_back({{gone, m.offload_col[j]}, {1, -1}, -kInf, 0});
  const double offload_us = mb.p.offload_us(j / mb.M);
  m.rows.push_back({{at, m.offload_start_col[j], gone}, {1, -1, -horizon}, offload_us - horizon, kInf});
  m.rows.push_back({{m.reload_start_col[j], at, back}, {1, -1, horizon}, 0, kInf});
  return {gone, back};
}

}  // namespace

DeviceMemory device_memory(const Builder& mb, const DeviceOrders& o) {
  const Problem& p = mb.p;
  DeviceMemory mem{p.devices[o.d]};
  for (const Op& op : o.list)
    if (op.kind == OpKind::kF && mb.m.offload_col[op.stage * mb.M + op.microbatch] >= 0)
      mem.offloaded_here.push_back(op.stage * mb.M + op.microbatch);
  mem.big = static_cast<double>(mem.dev.static_bytes);
  for (const Op& op : o.list) {
    const StageSpec& h = p.stages[op.stage];
    mem.big += std::abs(static_cast<double>(act_delta_bytes(h, op.kind))) +
               std::max({h.ws_f_bytes, h.ws_b_bytes, h.ws_w_bytes, dropped_bytes(p, op.stage)});
  }
  for (int j : mem.offloaded_here)  // gone, back
    mem.big += 2.0 * static_cast<double>(p.stages[j / mb.M].act_f_bytes);
  return mem;
}

// w = [x before y] · r, for a memory row that counts r's move only when x precedes y; bounded
// only from the side the row would push it, so a continuous w suffices.
int add_order_product(Builder& mb, int z, int r, bool complemented, double moved) {
  MilpModel& m = mb.m;
  const int w = add_col(mb, 0, 1, 0, false);
  m.products.push_back({w, z, r, complemented});
  const double sz = complemented ? -1 : 1, z0 = complemented ? 1 : 0;  // [x before y] = z0 + sz·z
  if (moved < 0) {
    m.rows.push_back({{w, z}, {1, -sz}, -kInf, z0});  // w ≤ [x before y]
    m.rows.push_back({{w, r}, {1, -1}, -kInf, 0});    // w ≤ r
  } else {
    m.rows.push_back({{w, z, r}, {1, -sz, -1}, z0 - 1, kInf});  // w ≥ [x before y] + r − 1
  }
  return w;
}

// The row for an allocation of `bytes` just as list[y] starts: static bytes plus every delta
// ordered before it (fixed, or by a binary) within the budget; with `when_recomputing`, only
// binding when list[y] (a B) recomputes. Infeasible when no order can fit it.
Status add_memory_row(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem, int y, double bytes,
                      bool when_recomputing) {
  const Problem& p = mb.p;
  const int M = mb.M;
  const Op& op = o.list[y];
  double fixed = static_cast<double>(mem.dev.static_bytes) + bytes;
  MilpRow row;
  for (int x = 0; x < o.n; x++) {
    if (x == y) continue;
    const Op& ox = o.list[x];
    const double delta = act_delta_bytes(p.stages[ox.stage], ox.kind);
    // A recompute moves dropped(s) from F's end to R's start, the start of B's block.
    const int r = rcol(mb, ox);
    const double sign = ox.kind == OpKind::kF ? -1.0 : 1.0;
    const double moved = r < 0 ? 0 : sign * static_cast<double>(dropped_bytes(p, ox.stage));
    if (o.before[x][y]) {
      fixed += delta;
      if (r >= 0) add_mib_term(row, r, moved);
    } else if (!o.before[y][x]) {
      const bool complemented = x > y;  // z says "y before x" then
      const int z = complemented ? o.pair_col[y][x] : o.pair_col[x][y];
      if (delta != 0) {
        add_mib_term(row, z, complemented ? -delta : delta);
        if (complemented) fixed += delta;
      }
      if (r < 0) continue;
      const int w = add_order_product(mb, z, r, complemented, moved);
      add_mib_term(row, w, moved);
    }
  }
  // Offloaded activations: gone where the offload ended by op's start, back where the reload
  // started by then.
  for (int j : mem.offloaded_here) {
    if (j == op.stage * M + op.microbatch) continue;
    const int f = o.index_of[op_id(p, Op{OpKind::kF, j / M, j % M})];
    if (o.before[y][f]) continue;  // not allocated yet, nor moved
    const double act_bytes = static_cast<double>(p.stages[j / M].act_f_bytes);
    const auto [gone, back] = gone_and_back(mb, j, col(mb, op));
    add_mib_term(row, gone, -act_bytes);
    add_mib_term(row, back, act_bytes);
  }
  double ub = static_cast<double>(mem.dev.mem_budget_bytes) - fixed;
  if (when_recomputing) {
    add_mib_term(row, rcol(mb, op), mem.big);
    ub += mem.big;
  }
  row.lb = -kInf;
  row.ub = ub / kMiB;
  if (!row.cols.empty())
    mb.m.rows.push_back(std::move(row));
  else if (row.ub < 0)
    return Status::Infeasible("device " + std::to_string(o.d) + " cannot fit " + op_name(op) + " in any order");
  return Status::Ok();
}

// Memory at every allocation: each F's start, each recompute's start (the start of its R+B
// block, when it recomputes), and each op with workspace.
Status add_allocation_rows(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem) {
  for (int y = 0; y < o.n; y++) {
    const Op& op = o.list[y];
    const StageSpec& g = mb.p.stages[op.stage];
    const int64_t ws = ws_bytes(g, op.kind);
    Status st = Status::Ok();
    if (op.kind == OpKind::kF || ws != 0) {
      const int64_t alloc_bytes = ws + (op.kind == OpKind::kF ? g.act_f_bytes : 0);
      st = add_memory_row(mb, o, mem, y, static_cast<double>(alloc_bytes), false);
    }
    if (st.ok() && rcol(mb, op) >= 0 && op.kind == OpKind::kB) {
      const int64_t r_bytes = dropped_bytes(mb.p, op.stage) + g.ws_f_bytes;  // R's allocation
      st = add_memory_row(mb, o, mem, y, static_cast<double>(r_bytes), true);
    }
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// Memory at offloadable activation j's reload start, binding when it is offloaded: the reload's
// bytes, plus every F started by then (u), less every B or W ended by then (v), plus the other
// offloaded activations as above, plus the largest workspace. A recompute's drop is not counted
// (too much, never too little).
void add_reload_memory_row(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem, int j, int64_t workspace) {
  const Problem& p = mb.p;
  MilpModel& m = mb.m;
  const int M = mb.M;
  const double horizon = mb.horizon_us;
  const int L = m.reload_start_col[j], oj = m.offload_col[j];
  const int fj = o.index_of[op_id(p, Op{OpKind::kF, j / M, j % M})];
  const int bj = o.index_of[op_id(p, Op{OpKind::kB, j / M, j % M})];
  double fixed = static_cast<double>(mem.dev.static_bytes + workspace + p.stages[j / M].act_f_bytes);
  MilpRow row;
  for (int x = 0; x < o.n; x++) {
    const Op& ox = o.list[x];
    const StageSpec& h = p.stages[ox.stage];
    if (x == fj || o.before[bj][x]) continue;  // F_j: offloaded; ops after B_j: after the reload too
    if (ox.kind == OpKind::kF) {
      if (o.before[x][fj]) {
        fixed += h.act_f_bytes;
        continue;
      }
      const int u = add_col(mb, 0, 1, 0, true);  // 0: starts after the reload
      m.rows.push_back({{col(mb, ox), L, u, oj}, {1, -1, horizon, -horizon}, kTieUs - horizon, kInf});
      add_mib_term(row, u, static_cast<double>(h.act_f_bytes));
    } else {
      const double delta = static_cast<double>(ox.kind == OpKind::kB ? h.act_b_bytes : h.act_w_bytes);
      if (o.before[x][fj]) {
        fixed += delta;
        continue;
      }
      const int v = add_col(mb, 0, 1, 0, true);  // 1: ends by the reload's start
      MilpRow ends{{L, col(mb, ox), v}, {1, -1, -horizon}, op_us(p, ox.kind, ox.stage) - horizon, kInf};
      extend_block(mb, ends, ox);
      m.rows.push_back(std::move(ends));
      add_mib_term(row, v, delta);
    }
  }
  for (int k : mem.offloaded_here) {
    if (k == j) continue;
    const double act_bytes = static_cast<double>(p.stages[k / M].act_f_bytes);
    const auto [gone, back] = gone_and_back(mb, k, L);
    add_mib_term(row, gone, -act_bytes);
    add_mib_term(row, back, act_bytes);
  }
  add_mib_term(row, oj, mem.big);
  row.lb = -kInf;
  row.ub = (static_cast<double>(mem.dev.mem_budget_bytes) - fixed + mem.big) / kMiB;
  m.rows.push_back(std::move(row));
}

void add_reload_memory_rows(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem) {
  int64_t workspace = 0;
  for (const Op& op : o.list) {
    const StageSpec& h = mb.p.stages[op.stage];
    workspace = std::max({workspace, h.ws_f_bytes, h.ws_b_bytes, h.ws_w_bytes});
  }
  for (int j : mem.offloaded_here) add_reload_memory_row(mb, o, mem, j, workspace);
}

}  // namespace optpipe::milp_build
