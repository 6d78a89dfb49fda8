// Exhaustive search over per-device orders, the reference the optimizer and the MILP are
// checked against on tiny problems.
#pragma once

#include <functional>
#include <random>
#include <vector>

#include "optpipe/schedule.h"
#include "optpipe/simulate.h"

namespace optpipe {

// Two devices, M microbatches, integer random costs, ample memory: small enough to enumerate.
inline Problem tiny_problem(std::mt19937& rng, int M) {
  UniformSpec u;
  u.num_devices = 2;
  u.num_microbatches = M;
  u.t_comm_us = rng() % 2 ? 0 : 50;
  Problem p = make_uniform_problem(u);
  for (StageSpec& st : p.stages) {
    st.t_f_us = 100 + rng() % 400;
    st.t_b_us = 100 + rng() % 600;
    st.t_w_us = 50 + rng() % 300;
  }
  return p;
}

// A host link on which an activation's transfer takes `latency_us` plus `bandwidth_us`.
inline void set_transfer_time(Problem* p, double latency_us, double bandwidth_us) {
  const double gb_per_s = static_cast<double>(p->stages[0].act_f_bytes) / (bandwidth_us * 1e3);
  p->host_link = {.d2h_gb_per_s = gb_per_s, .h2d_gb_per_s = gb_per_s, .latency_us = latency_us};
}

// Every order of each device's F/B/W ops that respects its own dependencies, simulated; the
// smallest makespan (of those within the budget, if asked; 0 if none). Tiny problems only.
inline double brute_force_makespan(const Problem& p, bool within_budget) {
  const int D = p.num_devices, M = p.num_microbatches;
  std::vector<std::vector<std::vector<Op>>> orders(D);
  for (int d = 0; d < D; d++) {
    std::vector<Op> ops;
    for (int i = 0; i < M; i++)
      for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW}) ops.push_back({k, d, i});
    std::vector<Op> cur;
    std::vector<bool> used(ops.size(), false);
    std::function<void()> extend = [&] {
      if (cur.size() == ops.size()) {
        orders[d].push_back(cur);
        return;
      }
      for (size_t k = 0; k < ops.size(); k++) {
        if (used[k]) continue;
        const Op& op = ops[k];
        // Own stage: F before B before W; microbatches of one kind in order (they are
        // interchangeable, so this loses no makespan).
        bool ready = true;
        for (size_t j = 0; j < ops.size(); j++) {
          if (used[j]) continue;
          const Op& o = ops[j];
          if (o.microbatch == op.microbatch && static_cast<int>(o.kind) < static_cast<int>(op.kind)) ready = false;
          if (o.kind == op.kind && o.microbatch < op.microbatch) ready = false;
        }
        if (!ready) continue;
        used[k] = true;
        cur.push_back(op);
        extend();
        cur.pop_back();
        used[k] = false;
      }
    };
    extend();
  }
  double best = 0;
  std::vector<size_t> pick(D, 0);
  for (;;) {
    Schedule s;
    s.devices.resize(D);
    for (int d = 0; d < D; d++) s.devices[d].compute = orders[d][pick[d]];
    SimResult r = simulate(p, s, {.op_times = false});
    bool fits = true;
    for (int e = 0; r.ok() && e < D; e++)
      fits = fits && r.timeline.devices[e].peak_bytes <= p.devices[e].mem_budget_bytes;
    if (r.ok() && (fits || !within_budget) && (best == 0 || r.timeline.makespan_us < best))
      best = r.timeline.makespan_us;
    int d = 0;
    while (d < D && ++pick[d] == orders[d].size()) pick[d++] = 0;
    if (d == D) break;
  }
  return best;
}

}  // namespace optpipe
