// The model of cp_sat.h written as a CpModelProto: the F/B/W starts on the grid, the recompute and
// offload choices, the memory reservoirs, the hint and the neighbourhood.
#include "exact/cp_sat_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "optpipe/simulate.h"

namespace optpipe {

Vars write_model(const Problem& p, const Grid& g, const CpSatOptions& o, ModelWriter* m) {
  const int S = p.num_stages(), M = p.num_microbatches;
  const bool recompute = o.memory && o.recompute, offload = o.memory && o.offload;
  Vars v;
  v.always = m->new_var(1, 1);
  // Floored onto the grid, whose durations are rounded down: the floor never cuts off a solution.
  const int64_t floor_steps =
      o.fix_to_hint ? 0 : static_cast<int64_t>(std::floor(o.makespan_at_least_us / g.unit_us + 1e-9));
  v.makespan = m->new_var(std::clamp<int64_t>(floor_steps, 0, g.horizon), g.horizon);
  auto at = [&](OpKind k, int s, int i) { return g.index[op_id(p, Op{k, s, i})]; };
  std::vector<std::vector<int64_t>> on_device(p.num_devices);
  std::vector<int> interval_of(g.ops.size());
  for (size_t k = 0; k < g.ops.size(); k++) {
    v.start.push_back(m->new_var(0, g.horizon - g.dur[k]));
    interval_of[k] = m->interval(v.start[k], g.dur[k]);
    on_device[p.device_of(g.ops[k].stage)].push_back(interval_of[k]);
  }
  auto hop = [&](int a, int b) { return p.device_of(a) == p.device_of(b) ? 0 : g.hop; };
  for (int s = 0; s < S; s++)
    for (int i = 0; i < M; i++) {
      const int F = at(OpKind::kF, s, i), B = at(OpKind::kB, s, i), W = at(OpKind::kW, s, i);
      if (s > 0) {
        const int prev = at(OpKind::kF, s - 1, i);
        m->at_least(v.start[F], v.start[prev], g.dur[prev] + hop(s - 1, s));
      }
      m->at_least(v.start[B], v.start[F], g.dur[F]);
      if (s + 1 < S) {
        const int next = at(OpKind::kB, s + 1, i);
        m->at_least(v.start[B], v.start[next], g.dur[next] + hop(s + 1, s));
      }
      m->at_least(v.start[W], v.start[B], g.dur[B]);
      m->at_least(v.makespan, v.start[W], g.dur[W]);
      if (i > 0 && !o.keep)  // first in, first out per stage and kind (a neighbourhood keeps its hint's order)
        for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW})
          m->at_least(v.start[at(k, s, i)], v.start[at(k, s, i - 1)], g.dur[at(k, s, i - 1)]);
    }
  const int n = S * M;
  v.recompute.assign(n, -1);
  v.r_start.assign(n, -1);
  v.offload.assign(n, -1);
  v.off_start.assign(n, -1);
  v.rel_start.assign(n, -1);
  std::vector<std::vector<int64_t>> offloads_on_link(p.devices.size()), reloads_on_link(p.devices.size());
  for (int s = 0; s < S; s++) {
    const StageSpec& st = p.stages[s];
    const int dev = p.device_of(s), link = p.devices[dev].host_link;
    for (int i = 0; i < M; i++) {
      const int k = s * M + i, F = at(OpKind::kF, s, i), B = at(OpKind::kB, s, i);
      if (recompute && st.act_f_bytes > st.act_input_bytes) {
        v.recompute[k] = m->new_var(0, 1);
        v.r_start[k] = m->new_var(0, g.horizon - g.r_dur[s]);
        on_device[dev].push_back(m->interval(v.r_start[k], g.r_dur[s], v.recompute[k]));
        m->at_least(v.r_start[k], v.start[F], g.dur[F], v.recompute[k]);
        m->at_least(v.start[B], v.r_start[k], g.r_dur[s], v.recompute[k]);
      }
      if (offload && st.act_f_bytes > 0) {
        v.offload[k] = m->new_var(0, 1);
        v.off_start[k] = m->new_var(0, g.horizon);
        v.rel_start[k] = m->new_var(0, g.horizon);
        offloads_on_link[link].push_back(m->interval(v.off_start[k], g.off_dur[s], v.offload[k]));
        reloads_on_link[link].push_back(m->interval(v.rel_start[k], g.rel_dur[s], v.offload[k]));
        m->at_least(v.off_start[k], v.start[F], g.dur[F], v.offload[k]);
        m->at_least(v.rel_start[k], v.off_start[k], g.off_dur[s], v.offload[k]);
        m->at_least(v.start[B], v.rel_start[k], g.rel_dur[s], v.offload[k]);
        if (v.recompute[k] >= 0) m->at_most_one(v.recompute[k], v.offload[k]);
      }
    }
  }
  for (const std::vector<int64_t>& d : on_device) m->no_overlap(d);
  for (size_t l = 0; l < p.devices.size(); l++) {
    m->no_overlap(offloads_on_link[l]);
    m->no_overlap(reloads_on_link[l]);
  }
  if (o.memory)
    for (int dev = 0; dev < p.num_devices; dev++) {
      std::vector<ModelWriter::Event> events;
      auto event = [&](int start_var, int64_t offset, int64_t change, int active) {
        if (change != 0) events.push_back({var_plus(start_var, offset), change, active});
      };
      for (int s = 0; s < S; s++) {
        if (p.device_of(s) != dev) continue;
        const StageSpec& st = p.stages[s];
        for (int i = 0; i < M; i++) {
          const int k = s * M + i;
          for (OpKind kind : {OpKind::kF, OpKind::kB, OpKind::kW}) {
            const int x = at(kind, s, i);
            const Op op{kind, s, i};
            event(v.start[x], 0, memory_delta(p, op, true, false), v.always);
            event(v.start[x], g.dur[x], memory_delta(p, op, false, false), v.always);
          }
          if (v.recompute[k] >= 0) {
            const int F = at(OpKind::kF, s, i);
            const Op r{OpKind::kR, s, i};
            event(v.start[F], g.dur[F], -(st.act_f_bytes - st.act_input_bytes), v.recompute[k]);
            event(v.r_start[k], 0, memory_delta(p, r, true, true), v.recompute[k]);
            event(v.r_start[k], g.r_dur[s], memory_delta(p, r, false, true), v.recompute[k]);
          }
          if (v.offload[k] >= 0) {
            event(v.off_start[k], g.off_dur[s], -st.act_f_bytes, v.offload[k]);
            event(v.rel_start[k], 0, st.act_f_bytes, v.offload[k]);
          }
        }
      }
      m->reservoir(events, p.devices[dev].mem_budget_bytes - p.devices[dev].static_bytes);
    }
  m->minimize(v.makespan);
  return v;
}

// The neighbourhood of `s`: the kept ops in its order on each device (a fused backward as B then
// W), the kept stage-microbatches' choices as in `s`.
void write_keep(const Problem& p, const Grid& g, const Schedule& s, const std::vector<bool>& keep, const Vars& v,
                ModelWriter* m) {
  const int M = p.num_microbatches;
  std::vector<bool> recomputed(p.num_stages() * M, false), offloaded(p.num_stages() * M, false);
  for (const DeviceSchedule& d : s.devices) {
    int prev = -1;  // the last kept op on the device, as a grid op
    for (const Op& op : d.compute) {
      if (op.kind == OpKind::kR) recomputed[op.stage * M + op.microbatch] = true;
      std::vector<Op> parts{op};
      if (op.kind == OpKind::kBW)
        parts = {{OpKind::kB, op.stage, op.microbatch}, {OpKind::kW, op.stage, op.microbatch}};
      for (const Op& part : parts) {
        if (part.kind != OpKind::kF && part.kind != OpKind::kB && part.kind != OpKind::kW) continue;
        if (!keep[op_id(p, part)]) continue;
        const int k = g.index[op_id(p, part)];
        if (prev >= 0) m->at_least(v.start[k], v.start[prev], g.dur[prev]);
        prev = k;
      }
    }
    for (const Op& op : d.offloads) offloaded[op.stage * M + op.microbatch] = true;
  }
  for (int k = 0; k < p.num_stages() * M; k++) {
    if (!keep[op_id(p, Op{OpKind::kF, k / M, k % M})]) continue;
    if (v.recompute[k] >= 0) m->fix(v.recompute[k], recomputed[k]);
    if (v.offload[k] >= 0) m->fix(v.offload[k], offloaded[k]);
  }
}

// The hint: `s` simulated, its start times on the grid, its recompute and offload choices. With
// `fifo` (the whole model, whose F's, B's and W's of a stage run in microbatch order) each stage's
// starts of one kind are handed out in that order, and the choices follow the forwards: a
// schedule that runs microbatches out of order is then a solution of the model too (every
// precedence links the same microbatch, and x_i ≥ y_i + d for every i keeps holding between the
// two sorted lists; a stage's memory events are the same times). As the schedule has it, CP-SAT
// finds such a hint infeasible and spends its time repairing it (its log, D = 8, M = 16).
void write_hint(const Problem& p, const Grid& g, const Schedule& s, const Vars& v, bool fifo, ModelWriter* m) {
  SimResult sim = simulate(p, s, {.op_times = true});
  if (!sim.ok()) return;
  const int S = p.num_stages(), M = p.num_microbatches;
  const Timeline& t = sim.timeline;
  auto step = [&](const Op& op) { return static_cast<int64_t>(std::floor(t.start_us[op_id(p, op)] / g.unit_us)); };
  auto ran = [&](const Op& op) { return !std::isnan(t.start_us[op_id(p, op)]); };
  std::vector<int64_t> vars, values;
  auto set = [&](int var, int64_t value) {
    if (var >= 0) vars.push_back(var), values.push_back(value);
  };
  std::vector<int64_t> start(g.ops.size(), -1);
  for (size_t k = 0; k < g.ops.size(); k++) {
    const Op& op = g.ops[k];
    int64_t at = ran(op) ? step(op) : -1;
    const Op bw{OpKind::kBW, op.stage, op.microbatch};
    if (at < 0 && op.kind != OpKind::kF && ran(bw))  // a fused backward: B, then W at once
      at = step(bw) + (op.kind == OpKind::kW ? g.dur[g.index[op_id(p, Op{OpKind::kB, op.stage, op.microbatch})]] : 0);
    if (at >= 0) start[k] = std::min<int64_t>(at, g.horizon - g.dur[k]);
  }
  // Per stage: the microbatch whose choices microbatch i takes (the i-th forward's).
  std::vector<int> chosen_of(static_cast<size_t>(S) * M);
  for (int st = 0; st < S; st++) {
    int* chosen = &chosen_of[static_cast<size_t>(st) * M];
    std::iota(chosen, chosen + M, 0);
    if (!fifo) continue;
    std::vector<int64_t> starts(M);
    for (OpKind kind : {OpKind::kF, OpKind::kB, OpKind::kW}) {
      auto k_of = [&](int i) { return g.index[op_id(p, Op{kind, st, i})]; };
      bool all = true;
      for (int i = 0; i < M && all; i++) all = k_of(i) >= 0 && start[k_of(i)] >= 0;
      if (!all) continue;
      if (kind == OpKind::kF)
        std::stable_sort(chosen, chosen + M, [&](int a, int b) { return start[k_of(a)] < start[k_of(b)]; });
      for (int i = 0; i < M; i++) starts[i] = start[k_of(i)];
      std::sort(starts.begin(), starts.end());
      for (int i = 0; i < M; i++) start[k_of(i)] = starts[i];
    }
  }
  for (size_t k = 0; k < g.ops.size(); k++)
    if (start[k] >= 0) set(v.start[k], start[k]);
  for (size_t k = 0; k < v.recompute.size(); k++) {
    const Op r{OpKind::kR, static_cast<int>(k) / M, chosen_of[k]};
    const Op off{OpKind::kOffload, r.stage, r.microbatch}, rel{OpKind::kReload, r.stage, r.microbatch};
    if (v.recompute[k] >= 0) {
      set(v.recompute[k], ran(r));
      if (ran(r)) set(v.r_start[k], step(r));
    }
    if (v.offload[k] >= 0) {
      set(v.offload[k], ran(off));
      if (ran(off)) set(v.off_start[k], step(off)), set(v.rel_start[k], step(rel));
    }
  }
  set(v.makespan, static_cast<int64_t>(std::ceil(t.makespan_us / g.unit_us - 1e-9)));
  m->hint(vars, values);
}

}  // namespace optpipe
