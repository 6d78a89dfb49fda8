#include "exact/grid.h"

#include <algorithm>
#include <cmath>

#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

double serial_total_us(const Problem& p, bool recompute, bool offload) {
  const int S = p.num_stages(), M = p.num_microbatches;
  double total_us = 2.0 * S * M * p.t_comm_us;
  for (int s = 0; s < S; s++) {
    const StageSpec& st = p.stages[s];
    total_us += M * (st.t_f_us + st.t_b_us + st.t_w_us + (recompute ? st.t_r_us : 0));
    if (offload) total_us += M * (p.offload_us(s) + p.reload_us(s));
  }
  return total_us;
}

// The coarsest 2^-k µs on which every duration and hop the model uses is exact (transfers only
// when they round up: rounded down they are a relaxation anyway).
double grid_unit_us(const Problem& p, bool recompute, bool offload, double unit_us, double total_us) {
  auto exact_on = [&](double unit) {
    auto whole = [&](double us) { return std::fabs(us / unit - std::round(us / unit)) < 1e-6; };
    if (!whole(p.t_comm_us)) return false;
    for (int s = 0; s < p.num_stages(); s++) {
      const StageSpec& st = p.stages[s];
      if (!whole(st.t_f_us) || !whole(st.t_b_us) || !whole(st.t_w_us)) return false;
      if (recompute && !whole(st.t_r_us)) return false;
      if (offload && (!whole(p.offload_us(s)) || !whole(p.reload_us(s)))) return false;
    }
    return true;
  };
  if (unit_us <= 0)
    for (double unit = 1; total_us / unit <= 1e8 && unit >= 1.0 / 1024; unit /= 2)
      if (exact_on(unit)) return unit;
  return unit_us > 0 ? unit_us : std::max(1.0, total_us / 1e8);
}

}  // namespace

Grid make_grid(const Problem& p, bool recompute, bool offload, double unit_us, bool transfers_round_up) {
  const int S = p.num_stages(), M = p.num_microbatches;
  const double total_us = serial_total_us(p, recompute, offload);
  Grid g;
  g.unit_us = grid_unit_us(p, recompute, offload && transfers_round_up, unit_us, total_us);
  g.horizon = static_cast<int>(std::ceil(total_us / g.unit_us)) + 1;
  g.hop = static_cast<int>(std::floor(p.t_comm_us / g.unit_us));
  g.index.assign(num_op_ids(p), -1);
  for (int s = 0; s < S; s++)
    for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW})
      for (int i = 0; i < M; i++) {
        const Op op{k, s, i};
        g.index[op_id(p, op)] = static_cast<int>(g.ops.size());
        g.ops.push_back(op);
        g.dur.push_back(static_cast<int>(std::floor(op_duration_us(p, op) / g.unit_us)));
      }
  for (int s = 0; s < S; s++) {
    g.r_dur.push_back(static_cast<int>(std::floor(p.stages[s].t_r_us / g.unit_us)));
    auto steps = [&](double us) {
      return static_cast<int>(transfers_round_up ? std::ceil(us / g.unit_us - 1e-9) : std::floor(us / g.unit_us));
    };
    g.off_dur.push_back(steps(p.offload_us(s)));
    g.rel_dur.push_back(steps(p.reload_us(s)));
  }
  return g;
}

ReadBack read_back(const Problem& p, const Grid& g, const std::vector<Op>& ops,
                   const std::function<double(const Op&)>& start, std::vector<TransferTimes> transfers,
                   const char* model) {
  ReadBack out;
  out.schedule = schedule_by_start(p, ops, start);
  if (!transfers.empty()) {
    auto end = [&](const Op& op) -> double {
      return start(op) + (op.kind == OpKind::kR ? g.r_dur[op.stage] : g.dur[g.index[op_id(p, op)]]);
    };
    add_transfers_by_start(p, start, end, std::move(transfers), &out.schedule);
    // The simulator may run a reload earlier than the model did; fix what that overflows.
    if (!settle_transfers(p, 4 * p.num_stages() * p.num_microbatches, &out.schedule))
      out.status =
          Status::Internal(std::string("the ") + model + " solution's transfers overflow a budget when simulated");
  }
  SimResult sim = simulate(p, out.schedule, {.op_times = false});
  if (sim.ok())
    out.objective_us = sim.timeline.makespan_us;
  else
    out.status = Status::Internal(std::string("the ") + model + " solution does not simulate: " + sim.status.message);
  return out;
}

}  // namespace optpipe
