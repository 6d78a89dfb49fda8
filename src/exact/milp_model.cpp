// Builds the MILP as plain data (no solver here; milp_cbc.cpp is the only file that talks to CBC).
#include "exact/milp_builder.h"

namespace optpipe {

size_t milp_min_binaries(const Problem& p) {
  const size_t M = static_cast<size_t>(p.num_microbatches);
  return static_cast<size_t>(p.num_stages()) * (M * (M - 1) / 2);
}

size_t MilpModel::num_binaries() const {
  return static_cast<size_t>(std::count(col_integer.begin(), col_integer.end(), 1));
}

namespace milp_build {

namespace {

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

}  // namespace

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

}  // namespace milp_build

using namespace milp_build;

Result<MilpModel> build_milp(const Problem& p, const MilpOptions& options) {
  using R = Result<MilpModel>;
  Status st = check_problem(p);
  if (st.ok()) st = check_no_recompute_layers(p);
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
