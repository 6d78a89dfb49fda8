// Builds the MILP as plain data (no solver here; milp_cbc.cpp is the only file that talks to CBC).
#include <algorithm>
#include <limits>

#include "optpipe/milp.h"

namespace optpipe {

Result<MilpModel> build_milp(const Problem& p, const MilpOptions& options) {
  using R = Result<MilpModel>;
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  const int S = p.num_stages(), M = p.num_microbatches, D = p.num_devices;
  const double inf = std::numeric_limits<double>::infinity();
  auto dur = [&](OpKind k, int s) {
    const StageSpec& g = p.stages[s];
    return k == OpKind::kF ? g.t_f_us : k == OpKind::kB ? g.t_b_us : g.t_w_us;
  };
  auto hop = [&](int a, int b) { return p.device_of(a) == p.device_of(b) ? 0.0 : p.t_comm_us; };

  double horizon = options.horizon_us;
  if (horizon <= 0) {
    for (int s = 0; s < S; s++) horizon += M * (dur(OpKind::kF, s) + dur(OpKind::kB, s) + dur(OpKind::kW, s));
    horizon += 2.0 * S * M * p.t_comm_us;
  }

  MilpModel m;
  m.start_col.assign(num_op_ids(p), -1);
  auto add_col = [&](double lb, double ub, double obj, bool integer) {
    m.col_lb.push_back(lb);
    m.col_ub.push_back(ub);
    m.objective.push_back(obj);
    m.col_integer.push_back(integer);
    return static_cast<int>(m.col_lb.size()) - 1;
  };
  // Ops per device, in a fixed order: by stage, kind, microbatch.
  std::vector<std::vector<Op>> ops(D);
  for (int s = 0; s < S; s++)
    for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW})
      for (int i = 0; i < M; i++) {
        const Op op{k, s, i};
        m.start_col[op_id(p, op)] = add_col(0, horizon - dur(k, s), 0, false);
        ops[p.device_of(s)].push_back(op);
      }
  m.makespan_col = add_col(0, horizon, 1, false);
  auto col = [&](const Op& op) { return m.start_col[op_id(p, op)]; };
  // start(b) − start(a) ≥ gap
  auto after = [&](const Op& a, const Op& b, double gap) { m.rows.push_back({{col(b), col(a)}, {1, -1}, gap, inf}); };

  for (int s = 0; s < S; s++) {
    for (int i = 0; i < M; i++) {
      const Op f{OpKind::kF, s, i}, b{OpKind::kB, s, i}, w{OpKind::kW, s, i};
      if (s > 0) after(Op{OpKind::kF, s - 1, i}, f, dur(OpKind::kF, s - 1) + hop(s - 1, s));
      after(f, b, dur(OpKind::kF, s));
      if (s + 1 < S) after(Op{OpKind::kB, s + 1, i}, b, dur(OpKind::kB, s + 1) + hop(s + 1, s));
      after(b, w, dur(OpKind::kB, s));
      m.rows.push_back({{m.makespan_col, col(w)}, {1, -1}, dur(OpKind::kW, s), inf});  // C ≥ end of W
      if (i + 1 < M)  // first in, first out per stage and kind
        for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW}) after(Op{k, s, i}, Op{k, s, i + 1}, dur(k, s));
    }
  }

  // Orders a device's own dependencies already imply (transitive closure of the rows above
  // restricted to one device), so only the rest need a binary.
  for (int d = 0; d < D; d++) {
    const std::vector<Op>& list = ops[d];
    const int n = static_cast<int>(list.size());
    std::vector<int> index_of(num_op_ids(p), -1);
    for (int k = 0; k < n; k++) index_of[op_id(p, list[k])] = k;
    std::vector<std::vector<char>> before(n, std::vector<char>(n, 0));
    auto edge = [&](const Op& a, const Op& b) {
      const int x = index_of[op_id(p, a)], y = index_of[op_id(p, b)];
      if (x >= 0 && y >= 0) before[x][y] = 1;
    };
    for (const Op& op : list) {
      const int s = op.stage, i = op.microbatch;
      if (op.kind == OpKind::kF && s > 0) edge(Op{OpKind::kF, s - 1, i}, op);
      if (op.kind == OpKind::kB) {
        edge(Op{OpKind::kF, s, i}, op);
        if (s + 1 < S) edge(Op{OpKind::kB, s + 1, i}, op);
      }
      if (op.kind == OpKind::kW) edge(Op{OpKind::kB, s, i}, op);
      if (i > 0) edge(Op{op.kind, s, i - 1}, op);
    }
    for (int k = 0; k < n; k++)  // Floyd–Warshall on booleans; n is small
      for (int x = 0; x < n; x++)
        if (before[x][k])
          for (int y = 0; y < n; y++)
            if (before[k][y]) before[x][y] = 1;

    std::vector<std::vector<int>> pair_col(n, std::vector<int>(n, -1));
    for (int x = 0; x < n; x++)
      for (int y = x + 1; y < n; y++) {
        if (before[x][y] || before[y][x]) continue;
        const Op& a = list[x];
        const Op& b = list[y];
        const int z = add_col(0, 1, 0, true);  // 1: a before b
        pair_col[x][y] = z;
        m.pairs.push_back({z, a, b});
        // start(b) ≥ end(a) − H(1 − z);  start(a) ≥ end(b) − H·z
        m.rows.push_back({{col(b), col(a), z}, {1, -1, -horizon}, dur(a.kind, a.stage) - horizon, inf});
        m.rows.push_back({{col(a), col(b), z}, {1, -1, horizon}, dur(b.kind, b.stage), inf});
      }

    if (!options.memory) continue;
    // At every allocation (each F, and any op with workspace), everything ordered before it has
    // applied its deltas; the sum stays within the budget. Rows in MiB keep the coefficients
    // near the others' magnitude.
    const DeviceSpec& dev = p.devices[d];
    for (int y = 0; y < n; y++) {
      const Op& op = list[y];
      const StageSpec& g = p.stages[op.stage];
      const int64_t ws = op.kind == OpKind::kF ? g.ws_f_bytes : op.kind == OpKind::kB ? g.ws_b_bytes : g.ws_w_bytes;
      if (op.kind != OpKind::kF && ws == 0) continue;
      double fixed = static_cast<double>(dev.static_bytes + ws + (op.kind == OpKind::kF ? g.act_f_bytes : 0));
      MilpRow row;
      for (int x = 0; x < n; x++) {
        if (x == y) continue;
        const Op& o = list[x];
        const StageSpec& h = p.stages[o.stage];
        const double delta = o.kind == OpKind::kF ? h.act_f_bytes : o.kind == OpKind::kB ? h.act_b_bytes : h.act_w_bytes;
        if (delta == 0) continue;
        if (before[x][y]) {
          fixed += delta;
        } else if (!before[y][x]) {
          const int z = x < y ? pair_col[x][y] : pair_col[y][x];
          row.cols.push_back(z);
          row.coefs.push_back(x < y ? delta : -delta);  // z = "x before y" or its complement
          if (x > y) fixed += delta;
        }
      }
      constexpr double kMiB = 1 << 20;
      for (double& c : row.coefs) c /= kMiB;
      row.lb = -inf;
      row.ub = (static_cast<double>(dev.mem_budget_bytes) - fixed) / kMiB;
      if (!row.cols.empty()) m.rows.push_back(std::move(row));
      else if (row.ub < 0) return R::Error(Status::Infeasible("device " + std::to_string(d) + " cannot fit " + op_name(op) + " in any order"));
    }
  }
  return R::Of(std::move(m));
}

}  // namespace optpipe
