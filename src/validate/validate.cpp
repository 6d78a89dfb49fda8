#include "optpipe/validate.h"

#include "optpipe/units.h"

namespace optpipe {
namespace {

constexpr size_t kMaxIssues = 50;  // enough to see a pattern, not a flood

struct Checker {
  const Problem& p;
  const Schedule& s;
  int S, M, D;
  std::vector<int> device_of_id;  // −1: absent
  std::vector<int> position;      // index in its list (compute / offloads / reloads)
  std::vector<Issue> issues;

  Checker(const Problem& p_, const Schedule& s_)
      : p(p_), s(s_), S(p_.num_stages()), M(p_.num_microbatches), D(p_.num_devices) {}

  int id(OpKind k, int stage, int mb) const { return op_id(S, M, Op{k, stage, mb}); }
  bool has(OpKind k, int stage, int mb) const { return device_of_id[id(k, stage, mb)] >= 0; }

  void report(int device, const Op* op, std::string message) {
    if (issues.size() >= kMaxIssues) return;
    Issue i;
    i.device = device;
    if (op) {
      i.op = *op;
      i.has_op = true;
    }
    i.message = std::move(message);
    issues.push_back(std::move(i));
  }

  std::string dev(int d) const { return "device " + std::to_string(d); }

  void record(int d, const Op& op, int pos, bool kind_ok, const char* list) {
    if (!kind_ok) {
      report(d, &op, dev(d) + ": " + op_name(op) + " does not belong in the " + list + " list");
      return;
    }
    if (op.stage < 0 || op.stage >= S || op.microbatch < 0 || op.microbatch >= M) {
      report(d, &op,
             dev(d) + ": " + op_name(op) + " is out of range (" + std::to_string(S) + " stages, " + std::to_string(M) +
                 " microbatches)");
      return;
    }
    if (p.device_of(op.stage) != d) {
      report(d, &op,
             dev(d) + ": " + op_name(op) + " runs stage " + std::to_string(op.stage) + ", which lives on " +
                 dev(p.device_of(op.stage)));
      return;
    }
    const int i = op_id(S, M, op);
    if (device_of_id[i] >= 0) {
      report(d, &op, dev(d) + ": " + op_name(op) + " appears more than once");
      return;
    }
    device_of_id[i] = d;
    position[i] = pos;
  }

  void check_lists() {
    device_of_id.assign(num_op_ids(p), -1);
    position.assign(num_op_ids(p), -1);
    for (int d = 0; d < D; d++) {
      const DeviceSchedule& ds = s.devices[d];
      for (size_t k = 0; k < ds.compute.size(); k++)
        record(d, ds.compute[k], static_cast<int>(k), is_compute(ds.compute[k].kind), "compute");
      for (size_t k = 0; k < ds.offloads.size(); k++)
        record(d, ds.offloads[k], static_cast<int>(k), ds.offloads[k].kind == OpKind::kOffload, "offloads");
      for (size_t k = 0; k < ds.reloads.size(); k++)
        record(d, ds.reloads[k].reload, static_cast<int>(k), ds.reloads[k].reload.kind == OpKind::kReload, "reloads");
    }
  }

  void check_complete() {
    for (int st = 0; st < S; st++) {
      const int d = p.device_of(st);
      for (int mb = 0; mb < M; mb++) {
        auto missing = [&](OpKind k, const std::string& why) {
          Op op{k, st, mb};
          report(d, &op, dev(d) + ": " + op_name(op) + " is missing" + why);
        };
        auto extra = [&](OpKind k, const std::string& why) {
          Op op{k, st, mb};
          report(d, &op, dev(d) + ": " + op_name(op) + " is not allowed" + why);
        };
        if (!has(OpKind::kF, st, mb)) missing(OpKind::kF, "");
        const bool b = has(OpKind::kB, st, mb), w = has(OpKind::kW, st, mb), bw = has(OpKind::kBW, st, mb);
        if (bw && (b || w)) extra(b ? OpKind::kB : OpKind::kW, ": the backward is already fused into BW");
        if (!bw && !b && !w) missing(OpKind::kBW, " (or B and W)");
        if (!bw && b && !w) missing(OpKind::kW, " (its B is there)");
        if (!bw && !b && w) missing(OpKind::kB, " (its W is there)");
        const bool r = has(OpKind::kR, st, mb), off = has(OpKind::kOffload, st, mb), rel = has(OpKind::kReload, st, mb);
        if (r && off) extra(OpKind::kR, ": the activation is offloaded, not recomputed");
        if (off && !rel) missing(OpKind::kReload, " (its offload is there)");
        if (rel && !off) missing(OpKind::kOffload, " (its reload is there)");
        if (has(OpKind::kWait, st, mb) && !off) extra(OpKind::kWait, ": there is no offload to wait for");
      }
    }
  }

  // Same-device inputs must come earlier in the compute list.
  void check_local_order() {
    for (int d = 0; d < D; d++) {
      for (const Op& op : s.devices[d].compute) {
        if (op.stage < 0 || op.stage >= S || op.microbatch < 0 || op.microbatch >= M) continue;
        const int i = op_id(S, M, op);
        if (device_of_id[i] != d) continue;
        auto need = [&](OpKind k, int st) {
          if (st < 0 || st >= S) return;
          const int j = id(k, st, op.microbatch);
          if (device_of_id[j] == d && position[j] > position[i])
            report(d, &op,
                   dev(d) + ": " + op_name(op) + " comes before " + op_name(Op{k, st, op.microbatch}) +
                       ", which it needs");
        };
        switch (op.kind) {
          case OpKind::kF: need(OpKind::kF, op.stage - 1); break;
          case OpKind::kB:
          case OpKind::kBW:
            need(OpKind::kF, op.stage);
            need(OpKind::kR, op.stage);
            need(has(OpKind::kB, op.stage + 1, op.microbatch) ? OpKind::kB : OpKind::kBW, op.stage + 1);
            break;
          case OpKind::kW: need(OpKind::kB, op.stage); break;
          case OpKind::kR:
          case OpKind::kWait: need(OpKind::kF, op.stage); break;
          default: break;
        }
      }
    }
  }

  void check_anchors() {
    for (int d = 0; d < D; d++) {
      for (const ReloadEntry& r : s.devices[d].reloads) {
        const Op& op = r.reload;
        if (op.kind != OpKind::kReload || op.stage < 0 || op.stage >= S || op.microbatch < 0 || op.microbatch >= M)
          continue;
        const Op& a = r.anchor;
        const bool in_range = a.stage >= 0 && a.stage < S && a.microbatch >= 0 && a.microbatch < M;
        const int ai = in_range ? op_id(S, M, a) : -1;
        if (!is_compute(a.kind) || ai < 0 || device_of_id[ai] != d) {
          report(d, &op,
                 dev(d) + ": " + op_name(op) + " is anchored to " + op_name(a) + ", which " + dev(d) + " does not run");
          continue;
        }
        const int b = has(OpKind::kB, op.stage, op.microbatch) ? id(OpKind::kB, op.stage, op.microbatch)
                                                               : id(OpKind::kBW, op.stage, op.microbatch);
        if (device_of_id[b] == d && position[ai] >= position[b])
          report(d, &op,
                 dev(d) + ": " + op_name(op) + " is anchored to " + op_name(a) + ", which does not come before " +
                     op_name(op_from_id(p, b)) + " that waits for it");
        for (const Op& x : r.after) {
          const bool kind_ok = x.kind == OpKind::kOffload || is_compute(x.kind);
          const bool ok = kind_ok && x.stage >= 0 && x.stage < S && x.microbatch >= 0 && x.microbatch < M &&
                          device_of_id[op_id(S, M, x)] == d;
          if (!ok)
            report(d, &op,
                   dev(d) + ": " + op_name(op) + " waits for " + op_name(x) +
                       ", which is not a compute op or offload " + dev(d) + " runs");
          else if (is_compute(x.kind) && device_of_id[b] == d && position[op_id(S, M, x)] >= position[b])
            report(d, &op,
                   dev(d) + ": " + op_name(op) + " waits for " + op_name(x) + ", which does not come before " +
                       op_name(op_from_id(p, b)) + " that waits for it");
        }
      }
    }
  }
};

}  // namespace

std::string Validation::summary() const {
  std::string out;
  for (const Issue& i : issues) out += i.message + "\n";
  return out;
}

Validation validate(const Problem& p, const Schedule& s, const ValidateOptions& options) {
  Validation v;
  Checker c(p, s);
  if (Status st = check_problem(p); !st.ok()) {
    c.report(-1, nullptr, "the problem itself is invalid: " + st.message);
    v.issues = std::move(c.issues);
    return v;
  }
  if (static_cast<int>(s.devices.size()) != p.num_devices) {
    c.report(-1, nullptr,
             "schedule has " + std::to_string(s.devices.size()) + " devices, the problem has " +
                 std::to_string(p.num_devices));
    v.issues = std::move(c.issues);
    return v;
  }
  if (s.placement != p.placement || s.chunks_per_device != p.chunks_per_device) {
    c.report(-1, nullptr,
             std::string("schedule is for placement ") + placement_name(s.placement) + " with " +
                 std::to_string(s.chunks_per_device) + " chunk(s) per device, the problem is " +
                 placement_name(p.placement) + " with " + std::to_string(p.chunks_per_device));
    v.issues = std::move(c.issues);
    return v;
  }
  c.check_lists();
  c.check_complete();
  c.check_local_order();
  c.check_anchors();
  if (!c.issues.empty()) {
    v.issues = std::move(c.issues);
    return v;
  }

  v.sim = simulate(p, s, options.sim);
  if (!v.sim.ok()) {
    for (const Op& op : v.sim.stuck) {
      const int d = p.device_of(op.stage);
      c.report(d, &op,
               "deadlock: device " + std::to_string(d) + " waits to run " + op_name(op) +
                   ", whose inputs never arrive");
    }
    if (v.sim.stuck.empty()) c.report(-1, nullptr, v.sim.status.message);
  } else if (options.check_memory_budget) {
    for (int d = 0; d < p.num_devices; d++) {
      const DeviceFigures& f = v.sim.timeline.devices[d];
      const int64_t budget = p.devices[d].mem_budget_bytes;
      if (p.devices[d].static_bytes > budget)
        c.report(d, nullptr,
                 "device " + std::to_string(d) + ": static memory alone (" + format_bytes(p.devices[d].static_bytes) +
                     ") exceeds its budget of " + format_bytes(budget));
      else if (f.peak_bytes > budget)
        c.report(d, &f.peak_op,
                 "device " + std::to_string(d) + ": memory peaks at " + format_bytes(f.peak_bytes) + " when " +
                     op_name(f.peak_op) + " runs, over its budget of " + format_bytes(budget) + " by " +
                     format_bytes(f.peak_bytes - budget));
      else if (options.check_any_timing && options.sim.any_timing && f.worst_peak_bytes > budget)
        c.report(d, &f.worst_peak_op,
                 "device " + std::to_string(d) + ": fits at the profile's timings, but if offloads run late or " +
                     "reloads start early memory can reach " + format_bytes(f.worst_peak_bytes) + " when " +
                     op_name(f.worst_peak_op) + " runs, over its budget of " + format_bytes(budget) + " by " +
                     format_bytes(f.worst_peak_bytes - budget) +
                     ": the schedule needs a WAIT or a reload's `after` there (optpipe optimize adds them)");
    }
  }
  v.issues = std::move(c.issues);
  return v;
}

}  // namespace optpipe
