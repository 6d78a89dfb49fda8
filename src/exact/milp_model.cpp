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

size_t MilpModel::num_binaries() const { return static_cast<size_t>(std::count(col_integer.begin(), col_integer.end(), 1)); }

Result<MilpModel> build_milp(const Problem& p, const MilpOptions& options) {
  using R = Result<MilpModel>;
  Status st = check_problem(p);
  if (!st.ok()) return R::Error(st);
  const int S = p.num_stages(), M = p.num_microbatches, D = p.num_devices;
  const double inf = std::numeric_limits<double>::infinity();
  auto dur = [&](OpKind k, int s) { return op_duration_us(p, Op{k, s, 0}); };
  auto hop = [&](int a, int b) { return p.device_of(a) == p.device_of(b) ? 0.0 : p.t_comm_us; };
  // What a recompute of stage s frees between F and R.
  auto dropped = [&](int s) { return p.stages[s].act_f_bytes - p.stages[s].act_input_bytes; };
  const bool recompute = options.memory && options.recompute, offload = options.memory && options.offload;

  double horizon = options.horizon_us;
  if (horizon <= 0) {
    for (int s = 0; s < S; s++) {
      horizon += M * (dur(OpKind::kF, s) + dur(OpKind::kB, s) + dur(OpKind::kW, s) + (recompute ? p.stages[s].t_r_us : 0));
      if (offload) horizon += M * (p.offload_us(s) + p.reload_us(s));
    }
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
  // Load cuts: no schedule of the placement is faster (none that fits, with the budget). Slightly
  // under, so that rounding never cuts off an optimum that meets the bound.
  const double cut = (options.memory ? makespan_lower_bound(p) : load_lower_bound(p)) * (1 - 1e-9);
  m.makespan_col = add_col(std::min(cut, horizon), horizon, 1, false);
  m.recompute_col.assign(static_cast<size_t>(S) * M, -1);
  for (int s = 0; s < S && recompute; s++)
    for (int i = 0; i < M; i++)
      if (dropped(s) > 0) m.recompute_col[s * M + i] = add_col(0, 1, 0, true);
  m.offload_col.assign(static_cast<size_t>(S) * M, -1);
  m.offload_start_col.assign(static_cast<size_t>(S) * M, -1);
  m.reload_start_col.assign(static_cast<size_t>(S) * M, -1);
  for (int s = 0; s < S && offload; s++)
    for (int i = 0; i < M; i++)
      if (p.stages[s].act_f_bytes > 0) {
        m.offload_col[s * M + i] = add_col(0, 1, 0, true);
        m.offload_start_col[s * M + i] = add_col(0, horizon, 0, false);
        m.reload_start_col[s * M + i] = add_col(0, horizon, 0, false);
      }
  auto col = [&](const Op& op) { return m.start_col[op_id(p, op)]; };
  auto rcol = [&](const Op& op) {
    return op.kind == OpKind::kF || op.kind == OpKind::kB ? m.recompute_col[op.stage * M + op.microbatch] : -1;
  };
  // A B op's block is R + B: its end moves by t_R when it recomputes.
  auto extend_block = [&](MilpRow& row, const Op& a) {
    if (a.kind == OpKind::kB && rcol(a) >= 0) {
      row.cols.push_back(rcol(a));
      row.coefs.push_back(-p.stages[a.stage].t_r_us);
    }
  };
  // start(b) − start(a) ≥ gap, where gap counts from a's start to its end (+ a hop)
  auto after = [&](const Op& a, const Op& b, double gap) {
    MilpRow row{{col(b), col(a)}, {1, -1}, gap, inf};
    extend_block(row, a);
    m.rows.push_back(std::move(row));
  };

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

  // Transfers: offload after F; reload after the offload, B after the reload (when offloaded);
  // not both offloaded and recomputed; one transfer at a time per direction of a host link.
  int max_link = 0;
  for (const DeviceSpec& dev : p.devices) max_link = std::max(max_link, dev.host_link);
  std::vector<std::vector<int>> on_link(max_link + 1);  // stage·M + microbatch with an offload binary
  for (int s = 0; s < S && offload; s++)
    for (int i = 0; i < M; i++) {
      const int j = s * M + i, o = m.offload_col[j];
      if (o < 0) continue;
      const int O = m.offload_start_col[j], L = m.reload_start_col[j];
      m.rows.push_back({{O, col(Op{OpKind::kF, s, i})}, {1, -1}, dur(OpKind::kF, s), inf});
      m.rows.push_back({{L, O, o}, {1, -1, -horizon}, p.offload_us(s) - horizon, inf});
      m.rows.push_back({{col(Op{OpKind::kB, s, i}), L, o}, {1, -1, -horizon}, p.reload_us(s) - horizon, inf});
      if (m.recompute_col[j] >= 0) m.rows.push_back({{o, m.recompute_col[j]}, {1, 1}, -inf, 1});
      on_link[p.devices[p.device_of(s)].host_link].push_back(j);
    }
  for (const std::vector<int>& link : on_link)
    for (size_t x = 0; x < link.size(); x++)
      for (size_t y = x + 1; y < link.size(); y++) {
        const int a = link[x], b = link[y], oa = m.offload_col[a], ob = m.offload_col[b];
        for (const std::vector<int>* starts : {&m.offload_start_col, &m.reload_start_col}) {
          const bool out = starts == &m.offload_start_col;
          const double da = out ? p.offload_us(a / M) : p.reload_us(a / M), db = out ? p.offload_us(b / M) : p.reload_us(b / M);
          const int q = add_col(0, 1, 0, true);  // 1: a's transfer first
          // start(b) ≥ end(a) − H(1 − q) − H(2 − oa − ob);  start(a) ≥ end(b) − H·q − H(2 − oa − ob)
          m.rows.push_back({{(*starts)[b], (*starts)[a], q, oa, ob}, {1, -1, -horizon, -horizon, -horizon}, da - 3 * horizon, inf});
          m.rows.push_back({{(*starts)[a], (*starts)[b], q, oa, ob}, {1, -1, horizon, -horizon, -horizon}, db - 2 * horizon, inf});
        }
      }

  // For a memory check at time column `at`, two binaries on offloadable activation j: a = 1 only
  // where j is offloaded and its offload ended by then (gone), b = 1 wherever its reload started
  // by then (back).
  auto gone_and_back = [&](int j, int at) {
    const int a = add_col(0, 1, 0, true), b = add_col(0, 1, 0, true);
    m.rows.push_back({{a, m.offload_col[j]}, {1, -1}, -inf, 0});
    m.rows.push_back({{at, m.offload_start_col[j], a}, {1, -1, -horizon}, p.offload_us(j / M) - horizon, inf});
    m.rows.push_back({{m.reload_start_col[j], at, b}, {1, -1, horizon}, 0, inf});
    return std::pair{a, b};
  };

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
        MilpRow ab{{col(b), col(a), z}, {1, -1, -horizon}, dur(a.kind, a.stage) - horizon, inf};
        MilpRow ba{{col(a), col(b), z}, {1, -1, horizon}, dur(b.kind, b.stage), inf};
        extend_block(ab, a);
        extend_block(ba, b);
        m.rows.push_back(std::move(ab));
        m.rows.push_back(std::move(ba));
      }

    if (!options.memory) continue;
    // Memory at every allocation: each F's start, each recompute's start (the start of its R+B
    // block, when it recomputes), and each op with workspace. Everything ordered before it has
    // applied its deltas; the sum stays within the budget. Rows in MiB keep the coefficients
    // near the others' magnitude.
    const DeviceSpec& dev = p.devices[d];
    constexpr double kMiB = 1 << 20;
    std::vector<int> offloaded_here;  // stage·M + microbatch with an offload binary, on this device
    for (const Op& o : list)
      if (o.kind == OpKind::kF && m.offload_col[o.stage * M + o.microbatch] >= 0) offloaded_here.push_back(o.stage * M + o.microbatch);
    double big = static_cast<double>(dev.static_bytes);  // exceeds any sum of this device's deltas
    for (const Op& o : list) {
      const StageSpec& h = p.stages[o.stage];
      big += std::abs(static_cast<double>(o.kind == OpKind::kF ? h.act_f_bytes : o.kind == OpKind::kB ? h.act_b_bytes : h.act_w_bytes)) +
             std::max({h.ws_f_bytes, h.ws_b_bytes, h.ws_w_bytes, dropped(o.stage)});
    }
    for (int j : offloaded_here) big += 2.0 * static_cast<double>(p.stages[j / M].act_f_bytes);  // gone, back
    // The row for an allocation of `bytes` just as `list[y]` starts; with `when_recomputing`, only
    // binding when list[y] (a B) recomputes.
    auto add_memory_row = [&](int y, double bytes, bool when_recomputing) -> Status {
      const Op& op = list[y];
      double fixed = static_cast<double>(dev.static_bytes) + bytes;
      MilpRow row;
      auto term = [&](int c, double coef) {
        row.cols.push_back(c);
        row.coefs.push_back(coef / kMiB);
      };
      for (int x = 0; x < n; x++) {
        if (x == y) continue;
        const Op& o = list[x];
        const StageSpec& h = p.stages[o.stage];
        const double delta = o.kind == OpKind::kF ? h.act_f_bytes : o.kind == OpKind::kB ? h.act_b_bytes : h.act_w_bytes;
        // A recompute moves dropped(s) from F's end to R's start, the start of B's block.
        const int r = rcol(o);
        const double moved = r < 0 ? 0 : (o.kind == OpKind::kF ? -1.0 : 1.0) * static_cast<double>(dropped(o.stage));
        if (before[x][y]) {
          fixed += delta;
          if (r >= 0) term(r, moved);
        } else if (!before[y][x]) {
          const bool complemented = x > y;  // z says "y before x" then
          const int z = complemented ? pair_col[y][x] : pair_col[x][y];
          if (delta != 0) {
            term(z, complemented ? -delta : delta);
            if (complemented) fixed += delta;
          }
          if (r < 0) continue;
          // w = [x before y] · r, bounded from the side the row would push it.
          const int w = add_col(0, 1, 0, false);
          m.products.push_back({w, z, r, complemented});
          const double sz = complemented ? -1 : 1, z0 = complemented ? 1 : 0;  // [x before y] = z0 + sz·z
          if (moved < 0) {
            m.rows.push_back({{w, z}, {1, -sz}, -inf, z0});  // w ≤ [x before y]
            m.rows.push_back({{w, r}, {1, -1}, -inf, 0});    // w ≤ r
          } else {
            m.rows.push_back({{w, z, r}, {1, -sz, -1}, z0 - 1, inf});  // w ≥ [x before y] + r − 1
          }
          term(w, moved);
        }
      }
      // Offloaded activations: gone where the offload ended by op's start (a), back where the
      // reload started by then (b).
      for (int j : offloaded_here) {
        if (j == op.stage * M + op.microbatch) continue;
        const int f = index_of[op_id(p, Op{OpKind::kF, j / M, j % M})];
        if (before[y][f]) continue;  // not allocated yet, nor moved
        const double bytes = static_cast<double>(p.stages[j / M].act_f_bytes);
        const auto [a, b] = gone_and_back(j, col(op));
        term(a, -bytes);
        term(b, bytes);
      }
      double ub = static_cast<double>(dev.mem_budget_bytes) - fixed;
      if (when_recomputing) {
        term(rcol(op), big);
        ub += big;
      }
      row.lb = -inf;
      row.ub = ub / kMiB;
      if (!row.cols.empty()) m.rows.push_back(std::move(row));
      else if (row.ub < 0) return Status::Infeasible("device " + std::to_string(d) + " cannot fit " + op_name(op) + " in any order");
      return Status::Ok();
    };
    for (int y = 0; y < n; y++) {
      const Op& op = list[y];
      const StageSpec& g = p.stages[op.stage];
      const int64_t ws = op.kind == OpKind::kF ? g.ws_f_bytes : op.kind == OpKind::kB ? g.ws_b_bytes : g.ws_w_bytes;
      Status st = Status::Ok();
      if (op.kind == OpKind::kF || ws != 0) st = add_memory_row(y, static_cast<double>(ws + (op.kind == OpKind::kF ? g.act_f_bytes : 0)), false);
      if (st.ok() && rcol(op) >= 0 && op.kind == OpKind::kB)
        st = add_memory_row(y, static_cast<double>(dropped(op.stage) + g.ws_f_bytes), true);
      if (!st.ok()) return R::Error(st);
    }
    // Memory at each reload's start, binding when it is offloaded: the reload's bytes, plus every
    // F started by then (u), less every B or W ended by then (v), plus the other offloaded
    // activations as above, plus the largest workspace. A recompute's drop is not counted (too
    // much, never too little).
    int64_t workspace = 0;
    for (const Op& o : list) {
      const StageSpec& h = p.stages[o.stage];
      workspace = std::max({workspace, h.ws_f_bytes, h.ws_b_bytes, h.ws_w_bytes});
    }
    for (int j : offloaded_here) {
      const int L = m.reload_start_col[j], oj = m.offload_col[j];
      const int fj = index_of[op_id(p, Op{OpKind::kF, j / M, j % M})], bj = index_of[op_id(p, Op{OpKind::kB, j / M, j % M})];
      double fixed = static_cast<double>(dev.static_bytes + workspace + p.stages[j / M].act_f_bytes);
      MilpRow row;
      auto term = [&](int c, double coef) {
        row.cols.push_back(c);
        row.coefs.push_back(coef / kMiB);
      };
      for (int x = 0; x < n; x++) {
        const Op& o = list[x];
        const StageSpec& h = p.stages[o.stage];
        if (x == fj || before[bj][x]) continue;  // F_j: offloaded; ops after B_j: after the reload too
        if (o.kind == OpKind::kF) {
          if (before[x][fj]) {
            fixed += h.act_f_bytes;
            continue;
          }
          const int u = add_col(0, 1, 0, true);  // 0: starts after the reload
          m.rows.push_back({{col(o), L, u, oj}, {1, -1, horizon, -horizon}, kTieUs - horizon, inf});
          term(u, static_cast<double>(h.act_f_bytes));
        } else {
          const double delta = static_cast<double>(o.kind == OpKind::kB ? h.act_b_bytes : h.act_w_bytes);
          if (before[x][fj]) {
            fixed += delta;
            continue;
          }
          const int v = add_col(0, 1, 0, true);  // 1: ends by the reload's start
          MilpRow ends{{L, col(o), v}, {1, -1, -horizon}, dur(o.kind, o.stage) - horizon, inf};
          extend_block(ends, o);
          m.rows.push_back(std::move(ends));
          term(v, delta);
        }
      }
      for (int k : offloaded_here) {
        if (k == j) continue;
        const double bytes = static_cast<double>(p.stages[k / M].act_f_bytes);
        const auto [a, b] = gone_and_back(k, L);
        term(a, -bytes);
        term(b, bytes);
      }
      term(oj, big);
      row.lb = -inf;
      row.ub = (static_cast<double>(dev.mem_budget_bytes) - fixed + big) / kMiB;
      m.rows.push_back(std::move(row));
    }
  }
  return R::Of(std::move(m));
}

}  // namespace optpipe
