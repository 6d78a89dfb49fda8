// The one file that talks to COIN-OR CBC: loads a MilpModel, warm-starts it, solves it within the
// time limit, and turns the solution back into a schedule.
#include <Cbc_C_Interface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "exact/by_start.h"
#include "optpipe/milp.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

// The matrix column by column and the rows' bounds, infinities as CBC's ±max: what
// Cbc_loadProblem takes.
struct ColumnMajor {
  std::vector<CoinBigIndex> starts{0};
  std::vector<int> index;
  std::vector<double> value, row_lb, row_ub;
};

ColumnMajor column_major(const MilpModel& m) {
  ColumnMajor cm;
  std::vector<std::vector<std::pair<int, double>>> by_col(m.col_lb.size());
  for (size_t r = 0; r < m.rows.size(); r++) {
    const MilpRow& row = m.rows[r];
    for (size_t k = 0; k < row.cols.size(); k++) by_col[row.cols[k]].push_back({static_cast<int>(r), row.coefs[k]});
    cm.row_lb.push_back(std::isinf(row.lb) ? -std::numeric_limits<double>::max() : row.lb);
    cm.row_ub.push_back(std::isinf(row.ub) ? std::numeric_limits<double>::max() : row.ub);
  }
  for (const auto& c : by_col) {
    for (const auto& [r, v] : c) {
      cm.index.push_back(r);
      cm.value.push_back(v);
    }
    cm.starts.push_back(static_cast<CoinBigIndex>(cm.index.size()));
  }
  return cm;
}

// A CBC model of m, silent, limited by the options.
Cbc_Model* load_model(const MilpModel& m, const MilpOptions& options) {
  const int n = static_cast<int>(m.col_lb.size());
  const ColumnMajor cm = column_major(m);
  Cbc_Model* model = Cbc_newModel();
  Cbc_loadProblem(model, n, static_cast<int>(m.rows.size()), cm.starts.data(), cm.index.data(), cm.value.data(),
                  m.col_lb.data(), m.col_ub.data(), m.objective.data(), cm.row_lb.data(), cm.row_ub.data());
  for (int c = 0; c < n; c++)
    if (m.col_integer[c]) Cbc_setInteger(model, c);
  Cbc_setParameter(model, "log", "0");
  Cbc_setParameter(model, "timeMode", "elapsed");  // else the limit counts CPU seconds
  Cbc_setParameter(model, "sec", std::to_string(options.time_limit_s).c_str());
  Cbc_setParameter(model, "threads", std::to_string(options.threads).c_str());
  if (options.max_nodes > 0) Cbc_setParameter(model, "maxNodes", std::to_string(options.max_nodes).c_str());
  return model;
}

// One device's start times in x, from the simulated warm start, and each F/B/W's place in its
// list (for the order binaries). An R just before its B opens B's block. False where the model
// cannot take the list: an R it has no binary for, or not just before its B.
bool warm_start_device(const Problem& p, const MilpModel& m, const DeviceSchedule& ds, const SimResult& sim,
                       std::vector<double>& x, std::vector<int>& position) {
  const int M = p.num_microbatches;
  auto place = [&](const Op& op, double start_us, size_t slot) {
    x[m.start_col[op_id(p, op)]] = start_us;
    position[op_id(p, op)] = static_cast<int>(slot);
  };
  for (size_t k = 0; k < ds.compute.size(); k++) {
    const Op& op = ds.compute[k];
    const double start = sim.timeline.start_us[op_id(p, op)];
    if (op.kind == OpKind::kR) {
      const int r = m.recompute_col[op.stage * M + op.microbatch];
      const Op* next = k + 1 < ds.compute.size() ? &ds.compute[k + 1] : nullptr;
      const bool before_its_b = next && next->stage == op.stage && next->microbatch == op.microbatch &&
                                (next->kind == OpKind::kB || next->kind == OpKind::kBW);
      if (r < 0 || !before_its_b) return false;
      x[r] = 1;
      place({OpKind::kB, op.stage, op.microbatch}, start, 2 * k);
      continue;
    }
    const bool recomputed = k > 0 && ds.compute[k - 1].kind == OpKind::kR;
    if (op.kind == OpKind::kBW) {  // B then W, back to back
      if (!recomputed) place({OpKind::kB, op.stage, op.microbatch}, start, 2 * k);
      place({OpKind::kW, op.stage, op.microbatch}, start + p.stages[op.stage].t_b_us, 2 * k + 1);
    } else if (m.start_col[op_id(p, op)] >= 0 && !(op.kind == OpKind::kB && recomputed)) {
      place(op, start, 2 * k);
    }
  }
  return true;
}

// Hands CBC the warm start as a first solution, where it simulates and the model can take it
// (no offloads; each R just before its B, and only where the model decides recomputes).
void set_warm_start(Cbc_Model* model, const Problem& p, const MilpModel& m, const Schedule& warm_start) {
  const int n = static_cast<int>(m.col_lb.size()), M = p.num_microbatches;
  SimResult sim = simulate(p, warm_start);
  if (!sim.ok()) return;
  std::vector<double> x(n, 0);
  std::vector<int> position(num_op_ids(p), -1);
  for (const DeviceSchedule& ds : warm_start.devices)
    if (!ds.offloads.empty() || !warm_start_device(p, m, ds, sim, x, position)) return;
  x[m.makespan_col] = sim.timeline.makespan_us;
  // Nothing offloaded: each offload "starts" at its F's end, each reload at the horizon.
  for (size_t j = 0; j < m.offload_col.size(); j++) {
    if (m.offload_col[j] < 0) continue;
    const Op f{OpKind::kF, static_cast<int>(j) / M, static_cast<int>(j) % M};
    x[m.offload_start_col[j]] = x[m.start_col[op_id(p, f)]] + p.stages[f.stage].t_f_us;
    x[m.reload_start_col[j]] = m.col_ub[m.reload_start_col[j]];
  }
  for (const MilpModel::Pair& pr : m.pairs) x[pr.col] = position[op_id(p, pr.a)] < position[op_id(p, pr.b)] ? 1 : 0;
  for (const MilpModel::Product& pr : m.products)
    x[pr.col] = (pr.z_complemented ? 1 - x[pr.z_col] : x[pr.z_col]) * x[pr.r_col];
  std::vector<int> cols(n);
  for (int c = 0; c < n; c++) cols[c] = c;
  Cbc_setMIPStartI(model, n, cols.data(), x.data());
}

// The schedule of solution x: each device's ops by their start times (a recomputing B's block is
// R then B), then the offloaded activations' transfers, settled in the simulator.
void read_back_schedule(const Problem& p, const MilpModel& m, const double* x, MilpSolution* out) {
  const int M = p.num_microbatches;
  auto recomputes = [&](const Op& op) {
    const int r = m.recompute_col[op.stage * M + op.microbatch];
    return r >= 0 && x[r] > 0.5;
  };
  std::vector<Op> ops;
  for (int id = 0; id < num_op_ids(p); id++) {
    if (m.start_col[id] < 0) continue;
    const Op op = op_from_id(p, id);
    ops.push_back(op);
    if (op.kind == OpKind::kB && recomputes(op)) ops.push_back({OpKind::kR, op.stage, op.microbatch});
  }
  auto start = [&](const Op& op) {
    const Op block_op{op.kind == OpKind::kR ? OpKind::kB : op.kind, op.stage, op.microbatch};
    const double block = x[m.start_col[op_id(p, block_op)]];
    return op.kind == OpKind::kB && recomputes(op) ? block + p.stages[op.stage].t_r_us : block;
  };
  out->schedule = schedule_by_start(p, ops, start);
  std::vector<TransferTimes> transfers;
  for (size_t j = 0; j < m.offload_col.size(); j++)
    if (m.offload_col[j] >= 0 && x[m.offload_col[j]] > 0.5) {
      const int s = static_cast<int>(j) / M;
      const double off = x[m.offload_start_col[j]];
      transfers.push_back({s, static_cast<int>(j) % M, off, off + p.offload_us(s), x[m.reload_start_col[j]]});
    }
  if (transfers.empty()) return;
  auto end = [&](const Op& op) { return start(op) + op_duration_us(p, op); };
  add_transfers_by_start(p, start, end, std::move(transfers), &out->schedule);
  if (!settle_transfers(p, 4 * p.num_stages() * M, &out->schedule))
    out->status = Status::Internal("the MILP solution's transfers overflow a budget when simulated");
}

}  // namespace

MilpSolution solve_milp(const Problem& p, const MilpModel& m, const MilpOptions& options, const Schedule* warm_start) {
  const auto t0 = std::chrono::steady_clock::now();
  MilpSolution out;
  Cbc_Model* model = load_model(m, options);
  if (warm_start) set_warm_start(model, p, m, *warm_start);
  Cbc_solve(model);
  const double* x = Cbc_bestSolution(model);
  out.nodes = Cbc_getNodeCount(model);
  out.bound_us = Cbc_getBestPossibleObjValue(model);
  if (!x) {
    const bool infeasible = Cbc_isProvenInfeasible(model);
    out.status = infeasible ? Status::Infeasible("the MILP has no solution: nothing fits the budget")
                            : Status::TimeLimit("the MILP found no solution within its time limit");
  } else {
    out.objective_us = Cbc_getObjValue(model);
    out.proven_optimal = Cbc_isProvenOptimal(model);
    if (out.proven_optimal) out.bound_us = std::max(out.bound_us, out.objective_us * (1 - 1e-9));
    read_back_schedule(p, m, x, &out);
  }
  Cbc_deleteModel(model);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace optpipe
