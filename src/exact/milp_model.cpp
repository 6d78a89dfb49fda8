// Builds the MILP as plain data (no solver here; milp_cbc.cpp is the only file that talks to CBC).
#include <algorithm>
#include <limits>

#include "optpipe/milp.h"

namespace optpipe {

// A compute op that starts this much after a reload counts as after it; at equal times the
// simulator has both allocations.
constexpr double kTieUs = 1e-3;

size_t milp_min_binaries(const Problem& p) {
  const size_t M = static_cast<size_t>(p.num_microbatches);
  return static_cast<size_t>(p.num_stages()) * (M * (M - 1) / 2);
}

size_t MilpModel::num_binaries() const {
  return static_cast<size_t>(std::count(col_integer.begin(), col_integer.end(), 1));
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Memory rows are in MiB, which keeps their coefficients near the others' magnitude.
constexpr double kMiB = 1 << 20;

// What every part of the model reads, and the model they add to. The parts add their columns and
// rows in one fixed order: CBC's search depends on it.
struct Builder {
  const Problem& p;
  const MilpOptions& options;
  int S = 0, M = 0, D = 0;
  bool recompute = false, offload = false;  // decided by the model (only with memory)
  double horizon_us = 0;                    // big-M and time bound
  MilpModel m;
  std::vector<std::vector<Op>> ops;  // per device: its F, B, W by stage, kind, microbatch
};

double op_us(const Problem& p, OpKind k, int s) { return op_duration_us(p, Op{k, s, 0}); }
double hop_us(const Problem& p, int a, int b) { return p.device_of(a) == p.device_of(b) ? 0.0 : p.t_comm_us; }
// What a recompute of stage s frees between F and R.
int64_t dropped_bytes(const Problem& p, int s) { return p.stages[s].act_f_bytes - p.stages[s].act_input_bytes; }
int64_t act_delta_bytes(const StageSpec& h, OpKind k) {
  return k == OpKind::kF ? h.act_f_bytes : k == OpKind::kB ? h.act_b_bytes : h.act_w_bytes;
}
int64_t ws_bytes(const StageSpec& h, OpKind k) {
  return k == OpKind::kF ? h.ws_f_bytes : k == OpKind::kB ? h.ws_b_bytes : h.ws_w_bytes;
}

int add_col(Builder& mb, double lb, double ub, double obj, bool integer) {
  mb.m.col_lb.push_back(lb);
  mb.m.col_ub.push_back(ub);
  mb.m.objective.push_back(obj);
  mb.m.col_integer.push_back(integer);
  return static_cast<int>(mb.m.col_lb.size()) - 1;
}
int col(const Builder& mb, const Op& op) { return mb.m.start_col[op_id(mb.p, op)]; }
int rcol(const Builder& mb, const Op& op) {
  if (op.kind != OpKind::kF && op.kind != OpKind::kB) return -1;
  return mb.m.recompute_col[op.stage * mb.M + op.microbatch];
}
void add_mib_term(MilpRow& row, int c, double coef) {
  row.cols.push_back(c);
  row.coefs.push_back(coef / kMiB);
}

// A B op's block is R + B: its end moves by t_R when it recomputes.
void extend_block(const Builder& mb, MilpRow& row, const Op& a) {
  if (a.kind == OpKind::kB && rcol(mb, a) >= 0) {
    row.cols.push_back(rcol(mb, a));
    row.coefs.push_back(-mb.p.stages[a.stage].t_r_us);
  }
}

// start(y) − start(x) ≥ gap, where gap counts from x's start to its end (+ a hop)
void add_after(Builder& mb, const Op& x, const Op& y, double gap) {
  MilpRow row{{col(mb, y), col(mb, x)}, {1, -1}, gap, kInf};
  extend_block(mb, row, x);
  mb.m.rows.push_back(std::move(row));
}

// The option's horizon, else all work and hops in sequence: no schedule needs longer.
double model_horizon_us(const Builder& mb) {
  const Problem& p = mb.p;
  double horizon = mb.options.horizon_us;
  if (horizon <= 0) {
    for (int s = 0; s < mb.S; s++) {
      horizon += mb.M * (op_us(p, OpKind::kF, s) + op_us(p, OpKind::kB, s) + op_us(p, OpKind::kW, s) +
                         (mb.recompute ? p.stages[s].t_r_us : 0));
      if (mb.offload) horizon += mb.M * (p.offload_us(s) + p.reload_us(s));
    }
    horizon += 2.0 * mb.S * mb.M * p.t_comm_us;
  }
  return horizon;
}

// Every column but the order binaries: start times, the makespan, recompute and offload decisions.
void add_columns(Builder& mb) {
  const Problem& p = mb.p;
  MilpModel& m = mb.m;
  const int S = mb.S, M = mb.M;
  m.start_col.assign(num_op_ids(p), -1);
  mb.ops.assign(mb.D, {});
  for (int s = 0; s < S; s++)
    for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW})
      for (int i = 0; i < M; i++) {
        const Op op{k, s, i};
        m.start_col[op_id(p, op)] = add_col(mb, 0, mb.horizon_us - op_us(p, k, s), 0, false);
        mb.ops[p.device_of(s)].push_back(op);
      }
  // Load cuts: no schedule of the placement is faster (none that fits, with the budget). Slightly
  // under, so that rounding never cuts off an optimum that meets the bound.
  const double cut = (mb.options.memory ? makespan_lower_bound(p) : load_lower_bound(p)) * (1 - 1e-9);
  m.makespan_col = add_col(mb, std::min(cut, mb.horizon_us), mb.horizon_us, 1, false);
  m.recompute_col.assign(static_cast<size_t>(S) * M, -1);
  for (int s = 0; s < S && mb.recompute; s++)
    for (int i = 0; i < M; i++)
      if (dropped_bytes(p, s) > 0) m.recompute_col[s * M + i] = add_col(mb, 0, 1, 0, true);
  m.offload_col.assign(static_cast<size_t>(S) * M, -1);
  m.offload_start_col.assign(static_cast<size_t>(S) * M, -1);
  m.reload_start_col.assign(static_cast<size_t>(S) * M, -1);
  for (int s = 0; s < S && mb.offload; s++)
    for (int i = 0; i < M; i++)
      if (p.stages[s].act_f_bytes > 0) {
        m.offload_col[s * M + i] = add_col(mb, 0, 1, 0, true);
        m.offload_start_col[s * M + i] = add_col(mb, 0, mb.horizon_us, 0, false);
        m.reload_start_col[s * M + i] = add_col(mb, 0, mb.horizon_us, 0, false);
      }
}

// The simulator's dependencies, the makespan past every W, and first in, first out per stage and
// kind (no loss for identical microbatches, and far fewer orders to decide).
void add_precedence_rows(Builder& mb) {
  const Problem& p = mb.p;
  const int S = mb.S, M = mb.M;
  for (int s = 0; s < S; s++) {
    for (int i = 0; i < M; i++) {
      const Op f{OpKind::kF, s, i}, b{OpKind::kB, s, i}, w{OpKind::kW, s, i};
      if (s > 0) add_after(mb, {OpKind::kF, s - 1, i}, f, op_us(p, OpKind::kF, s - 1) + hop_us(p, s - 1, s));
      add_after(mb, f, b, op_us(p, OpKind::kF, s));
      if (s + 1 < S) add_after(mb, {OpKind::kB, s + 1, i}, b, op_us(p, OpKind::kB, s + 1) + hop_us(p, s + 1, s));
      add_after(mb, b, w, op_us(p, OpKind::kB, s));
      // C ≥ end of W
      mb.m.rows.push_back({{mb.m.makespan_col, col(mb, w)}, {1, -1}, op_us(p, OpKind::kW, s), kInf});
      if (i + 1 < M)
        for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW}) add_after(mb, {k, s, i}, {k, s, i + 1}, op_us(p, k, s));
    }
  }
}

// Transfers: offload after F; reload after the offload, B after the reload (when offloaded); not
// both offloaded and recomputed. Off, a binary leaves its times free but for the offload's start.
void add_transfer_rows(Builder& mb) {
  const Problem& p = mb.p;
  MilpModel& m = mb.m;
  const double horizon = mb.horizon_us;
  for (int s = 0; s < mb.S && mb.offload; s++)
    for (int i = 0; i < mb.M; i++) {
      const int j = s * mb.M + i, o = m.offload_col[j];
      if (o < 0) continue;
      const int O = m.offload_start_col[j], L = m.reload_start_col[j];
      m.rows.push_back({{O, col(mb, Op{OpKind::kF, s, i})}, {1, -1}, op_us(p, OpKind::kF, s), kInf});
      m.rows.push_back({{L, O, o}, {1, -1, -horizon}, p.offload_us(s) - horizon, kInf});
      const int B = col(mb, Op{OpKind::kB, s, i});
      m.rows.push_back({{B, L, o}, {1, -1, -horizon}, p.reload_us(s) - horizon, kInf});
      if (m.recompute_col[j] >= 0) m.rows.push_back({{o, m.recompute_col[j]}, {1, 1}, -kInf, 1});
    }
}

// One transfer at a time per direction of a host link, whichever devices share it: a big-M order
// binary per pair of offloadable activations there, binding only when both are offloaded.
void add_link_order_rows(Builder& mb) {
  const Problem& p = mb.p;
  MilpModel& m = mb.m;
  const int M = mb.M;
  const double horizon = mb.horizon_us;
  int max_link = 0;
  for (const DeviceSpec& dev : p.devices) max_link = std::max(max_link, dev.host_link);
  std::vector<std::vector<int>> on_link(max_link + 1);  // stage·M + microbatch with an offload binary
  for (int s = 0; s < mb.S; s++)
    for (int i = 0; i < M; i++)
      if (m.offload_col[s * M + i] >= 0) on_link[p.devices[p.device_of(s)].host_link].push_back(s * M + i);
  for (const std::vector<int>& link : on_link)
    for (size_t x = 0; x < link.size(); x++)
      for (size_t y = x + 1; y < link.size(); y++) {
        const int a = link[x], b = link[y], oa = m.offload_col[a], ob = m.offload_col[b];
        for (const std::vector<int>* starts : {&m.offload_start_col, &m.reload_start_col}) {
          const bool out = starts == &m.offload_start_col;
          const double da = out ? p.offload_us(a / M) : p.reload_us(a / M);
          const double db = out ? p.offload_us(b / M) : p.reload_us(b / M);
          const int q = add_col(mb, 0, 1, 0, true);  // 1: a's transfer first
          // start(b) ≥ end(a) − H(1 − q) − H(2 − oa − ob);  start(a) ≥ end(b) − H·q − H(2 − oa − ob)
          const int sa = (*starts)[a], sb = (*starts)[b];
          m.rows.push_back({{sb, sa, q, oa, ob}, {1, -1, -horizon, -horizon, -horizon}, da - 3 * horizon, kInf});
          m.rows.push_back({{sa, sb, q, oa, ob}, {1, -1, horizon, -horizon, -horizon}, db - 2 * horizon, kInf});
        }
      }
}

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

// One device's ops and their orders: before[x][y] where the dependencies already put list[x]
// first, else pair_col[min(x,y)][max(x,y)], the binary that decides it.
struct DeviceOrders {
  int d = 0;
  const std::vector<Op>& list;
  int n = 0;
  std::vector<int> index_of;  // op id → position in list, −1 otherwise
  std::vector<std::vector<char>> before;
  std::vector<std::vector<int>> pair_col;
};

// Orders a device's own dependencies already imply (transitive closure of the rows above
// restricted to one device), so only the rest need a binary.
DeviceOrders implied_orders(const Builder& mb, int d) {
  const Problem& p = mb.p;
  DeviceOrders o{d, mb.ops[d]};
  const std::vector<Op>& list = o.list;
  const int n = o.n = static_cast<int>(list.size());
  o.index_of.assign(num_op_ids(p), -1);
  for (int k = 0; k < n; k++) o.index_of[op_id(p, list[k])] = k;
  o.before.assign(n, std::vector<char>(n, 0));
  auto edge = [&](const Op& x_op, const Op& y_op) {
    const int x = o.index_of[op_id(p, x_op)], y = o.index_of[op_id(p, y_op)];
    if (x >= 0 && y >= 0) o.before[x][y] = 1;
  };
  for (const Op& op : list) {
    const int s = op.stage, i = op.microbatch;
    if (op.kind == OpKind::kF && s > 0) edge(Op{OpKind::kF, s - 1, i}, op);
    if (op.kind == OpKind::kB) {
      edge(Op{OpKind::kF, s, i}, op);
      if (s + 1 < mb.S) edge(Op{OpKind::kB, s + 1, i}, op);
    }
    if (op.kind == OpKind::kW) edge(Op{OpKind::kB, s, i}, op);
    if (i > 0) edge(Op{op.kind, s, i - 1}, op);
  }
  for (int k = 0; k < n; k++)  // Floyd–Warshall on booleans; n is small
    for (int x = 0; x < n; x++)
      if (o.before[x][k])
        for (int y = 0; y < n; y++)
          if (o.before[k][y]) o.before[x][y] = 1;
  return o;
}

// A big-M order binary for each pair of the device's ops that nothing orders yet.
void add_order_binaries(Builder& mb, DeviceOrders& o) {
  const Problem& p = mb.p;
  const double horizon = mb.horizon_us;
  o.pair_col.assign(o.n, std::vector<int>(o.n, -1));
  for (int x = 0; x < o.n; x++)
    for (int y = x + 1; y < o.n; y++) {
      if (o.before[x][y] || o.before[y][x]) continue;
      const Op& a = o.list[x];
      const Op& b = o.list[y];
      const int z = add_col(mb, 0, 1, 0, true);  // 1: a before b
      o.pair_col[x][y] = z;
      mb.m.pairs.push_back({z, a, b});
      // start(b) ≥ end(a) − H(1 − z);  start(a) ≥ end(b) − H·z
      MilpRow ab{{col(mb, b), col(mb, a), z}, {1, -1, -horizon}, op_us(p, a.kind, a.stage) - horizon, kInf};
      MilpRow ba{{col(mb, a), col(mb, b), z}, {1, -1, horizon}, op_us(p, b.kind, b.stage), kInf};
      extend_block(mb, ab, a);
      extend_block(mb, ba, b);
      mb.m.rows.push_back(std::move(ab));
      mb.m.rows.push_back(std::move(ba));
    }
}

// What a device's memory rows share: its budget, its offloadable activations, and a big-M above
// any sum of its deltas (which switches a row off).
struct DeviceMemory {
  const DeviceSpec& dev;
  std::vector<int> offloaded_here;  // stage·M + microbatch with an offload binary, on this device
  double big = 0;
};

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

}  // namespace

Result<MilpModel> build_milp(const Problem& p, const MilpOptions& options) {
  using R = Result<MilpModel>;
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  Builder mb{p, options, p.num_stages(), p.num_microbatches, p.num_devices};
  mb.recompute = options.memory && options.recompute;
  mb.offload = options.memory && options.offload;
  mb.horizon_us = model_horizon_us(mb);
  add_columns(mb);
  add_precedence_rows(mb);
  add_transfer_rows(mb);
  add_link_order_rows(mb);
  // Device by device: the orders left to decide, then memory at every allocation and reload,
  // where everything ordered before a check has applied its deltas.
  for (int d = 0; d < mb.D; d++) {
    DeviceOrders o = implied_orders(mb, d);
    add_order_binaries(mb, o);
    if (!options.memory) continue;
    const DeviceMemory mem = device_memory(mb, o);
    Status fits = add_allocation_rows(mb, o, mem);
    if (!fits.ok()) return R::Error(fits);
    add_reload_memory_rows(mb, o, mem);
  }
  return R::Of(std::move(mb.m));
}

}  // namespace optpipe
