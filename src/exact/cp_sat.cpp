// The one file that talks to CP-SAT: loads the ortools wheel's libortools at run time, writes the
// model of cp_sat.h as a CpModelProto, solves it through the library's C interface
// (SolveCpModelWithParameters: serialized model and SatParameters in, serialized
// CpSolverResponse out) and reads the solution back.
#include "optpipe/cp_sat.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <thread>

#include "exact/grid.h"
#include "exact/protobuf_wire.h"
#include "optpipe/simulate.h"

#ifndef OPTPIPE_ORTOOLS_DIR
#define OPTPIPE_ORTOOLS_DIR ""
#endif

namespace optpipe {

namespace {

// ortools/sat/c_api/cp_solver_c.h. The response is malloc'ed by the library; the caller frees it.
using SolveFn = void (*)(const void* model, int model_len, const void* params, int params_len, void** response,
                         int* response_len);

struct Library {
  SolveFn solve = nullptr;
  std::string error;  // why it did not load
};

// Loaded once, for the process's lifetime. RTLD_DEEPBIND: the library resolves its own copies of
// protobuf, abseil and COIN-OR first (optpipe links Debian's CBC); AddressSanitizer refuses it.
const Library& library() {
  static const Library lib = [] {
    Library l;
    if (const char* off = std::getenv("OPTPIPE_NO_CPSAT"); off && std::string(off) == "1") {
      l.error = "CP-SAT is switched off (OPTPIPE_NO_CPSAT=1)";
      return l;
    }
    const char* env = std::getenv("OPTPIPE_ORTOOLS_LIB");
    const std::string path =
        env && *env ? std::string(env) : std::string(OPTPIPE_ORTOOLS_DIR) + "/ortools/.libs/libortools.so.9";
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(__SANITIZE_ADDRESS__)
    flags |= RTLD_DEEPBIND;
#endif
    void* handle = dlopen(path.c_str(), flags);
    if (!handle) {
      const char* why = dlerror();
      l.error = "CP-SAT is not available: cannot load " + path + " (" + (why ? why : "unknown") +
                "); ./scripts/setup.sh fetches it (scripts/fetch_ortools.sh), or set OPTPIPE_ORTOOLS_LIB";
      return l;
    }
    l.solve = reinterpret_cast<SolveFn>(dlsym(handle, "SolveCpModelWithParameters"));
    if (!l.solve) l.error = "CP-SAT is not available: " + path + " has no SolveCpModelWithParameters";
    return l;
  }();
  return lib;
}

// Field numbers of ortools/sat/cp_model.proto and sat_parameters.proto (ortools 9.15).
namespace f {
constexpr int kModelVariables = 2, kModelConstraints = 3, kModelObjective = 4, kModelHint = 6;
constexpr int kVarDomain = 2;
constexpr int kExprVars = 1, kExprCoeffs = 2, kExprOffset = 3;
constexpr int kCtEnforcement = 2, kCtLinear = 12, kCtInterval = 19, kCtNoOverlap = 20, kCtReservoir = 24;
constexpr int kLinearVars = 1, kLinearCoeffs = 2, kLinearDomain = 3;
constexpr int kIntervalStart = 4, kIntervalEnd = 5, kIntervalSize = 6;
constexpr int kNoOverlapIntervals = 1;
constexpr int kReservoirMin = 1, kReservoirMax = 2, kReservoirTimes = 3, kReservoirActive = 5, kReservoirChanges = 6;
constexpr int kObjectiveVars = 1, kObjectiveCoeffs = 4;
constexpr int kHintVars = 1, kHintValues = 2;
constexpr int kParamsMaxTime = 36, kParamsSeed = 31, kParamsWorkers = 206, kParamsLog = 41;
constexpr int kParamsExpandReservoirs = 182, kParamsFixToHint = 192;
constexpr int kResponseStatus = 1, kResponseSolution = 2, kResponseObjective = 3, kResponseBound = 4;
constexpr int kResponseConflicts = 11, kResponseBranches = 12;
}  // namespace f

enum ResponseStatus { kUnknown = 0, kModelInvalid = 1, kFeasible = 2, kInfeasible = 3, kOptimal = 4 };

// A linear expression Σ coeff·var + offset.
struct Expr {
  std::vector<int64_t> vars, coeffs;
  int64_t offset = 0;
};
Expr var_plus(int v, int64_t offset) { return {{v}, {1}, offset}; }
Expr constant(int64_t c) { return {{}, {}, c}; }

wire::Writer expr_message(const Expr& e) {
  wire::Writer w;
  w.packed(f::kExprVars, e.vars);
  w.packed(f::kExprCoeffs, e.coeffs);
  if (e.offset != 0) w.int64(f::kExprOffset, e.offset);
  return w;
}

// Builds the CpModelProto as it goes: variables and constraints are repeated fields, written in
// the order they are made.
class ModelWriter {
 public:
  int new_var(int64_t lo, int64_t hi) {
    wire::Writer v;
    v.packed(f::kVarDomain, {lo, hi});
    model_.message(f::kModelVariables, v);
    return num_vars_++;
  }
  // a − b ≥ rhs, when `enforce` (a literal, −1: always).
  void at_least(int a, int b, int64_t rhs, int enforce = -1) {
    wire::Writer lin;
    lin.packed(f::kLinearVars, {a, b});
    lin.packed(f::kLinearCoeffs, {1, -1});
    lin.packed(f::kLinearDomain, {rhs, std::numeric_limits<int64_t>::max()});
    constraint(f::kCtLinear, lin, enforce);
  }
  void fix(int var, int64_t value) {
    wire::Writer lin;
    lin.packed(f::kLinearVars, {var});
    lin.packed(f::kLinearCoeffs, {1});
    lin.packed(f::kLinearDomain, {value, value});
    constraint(f::kCtLinear, lin, -1);
  }
  void at_most_one(int a, int b) {
    wire::Writer lin;
    lin.packed(f::kLinearVars, {a, b});
    lin.packed(f::kLinearCoeffs, {1, 1});
    lin.packed(f::kLinearDomain, {0, 1});
    constraint(f::kCtLinear, lin, -1);
  }
  // An interval [start, start + size), present when `presence` (−1: always); its index.
  int interval(int start, int64_t size, int presence = -1) {
    wire::Writer iv;
    iv.message(f::kIntervalStart, expr_message(var_plus(start, 0)));
    iv.message(f::kIntervalEnd, expr_message(var_plus(start, size)));
    iv.message(f::kIntervalSize, expr_message(constant(size)));
    constraint(f::kCtInterval, iv, presence);
    return num_constraints_ - 1;
  }
  void no_overlap(const std::vector<int64_t>& intervals) {
    if (intervals.size() < 2) return;
    wire::Writer no;
    no.packed(f::kNoOverlapIntervals, intervals);
    constraint(f::kCtNoOverlap, no, -1);
  }
  struct Event {
    Expr time;
    int64_t change;
    int active;  // a literal
  };
  void reservoir(const std::vector<Event>& events, int64_t max_level) {
    wire::Writer r;
    r.int64(f::kReservoirMin, 0);
    r.int64(f::kReservoirMax, max_level);
    std::vector<int64_t> active;
    for (const Event& e : events) {
      r.message(f::kReservoirTimes, expr_message(e.time));
      r.message(f::kReservoirChanges, expr_message(constant(e.change)));
      active.push_back(e.active);
    }
    r.packed(f::kReservoirActive, active);
    constraint(f::kCtReservoir, r, -1);
  }
  void minimize(int var) {
    wire::Writer o;
    o.packed(f::kObjectiveVars, {var});
    o.packed(f::kObjectiveCoeffs, {1});
    model_.message(f::kModelObjective, o);
  }
  void hint(const std::vector<int64_t>& vars, const std::vector<int64_t>& values) {
    wire::Writer h;
    h.packed(f::kHintVars, vars);
    h.packed(f::kHintValues, values);
    model_.message(f::kModelHint, h);
  }
  const std::string& bytes() const { return model_.data(); }

 private:
  void constraint(int kind, const wire::Writer& body, int enforce) {
    wire::Writer ct;
    if (enforce >= 0) ct.packed(f::kCtEnforcement, {enforce});
    ct.message(kind, body);
    model_.message(f::kModelConstraints, ct);
    num_constraints_++;
  }
  wire::Writer model_;
  int num_vars_ = 0, num_constraints_ = 0;
};

// The model's variables, by what they stand for.
struct Vars {
  std::vector<int> start;               // per grid op (F, B, W)
  std::vector<int> recompute, r_start;  // per stage·M + microbatch; −1 where not decided
  std::vector<int> offload, off_start, rel_start;
  int makespan = -1;
  int always = -1;  // the literal "true"
};

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

struct Response {
  int status = kUnknown;
  std::vector<int64_t> solution;
  double objective = 0, bound = 0;
  int64_t branches = 0, conflicts = 0;
  bool ok = false;  // parsed
};

Response parse_response(const char* data, size_t size) {
  Response r;
  wire::Reader in(data, size);
  int field = 0, wire_type = 0;
  while (in.next(&field, &wire_type)) {
    switch (field) {
      case f::kResponseStatus: r.status = static_cast<int>(in.varint()); break;
      case f::kResponseSolution: in.int64s(wire_type, &r.solution); break;
      case f::kResponseObjective: r.objective = in.dbl(); break;
      case f::kResponseBound: r.bound = in.dbl(); break;
      case f::kResponseBranches: r.branches = static_cast<int64_t>(in.varint()); break;
      case f::kResponseConflicts: r.conflicts = static_cast<int64_t>(in.varint()); break;
      default: in.skip(wire_type);
    }
  }
  r.ok = in.ok();
  return r;
}

std::string parameters(const CpSatOptions& o) {
  wire::Writer w;
  w.dbl(f::kParamsMaxTime, std::max(0.01, o.time_limit_s));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  w.int64(f::kParamsWorkers, o.workers > 0 ? o.workers : std::min(cores, 8));
  w.int64(f::kParamsSeed, static_cast<int64_t>(o.seed % 2147483647));
  w.varint(f::kParamsLog, 0);
  // The reservoirs kept as they are: expanded (the default) they grow quadratically in the
  // events, and presolve then loses the hint (a neighbourhood's first solution).
  w.varint(f::kParamsExpandReservoirs, 0);
  if (o.fix_to_hint) w.varint(f::kParamsFixToHint, 1);
  return w.data();
}

}  // namespace

bool cp_sat_model_fits(const Problem& p, const CpSatOptions& options) {
  const int64_t per_microbatch = 3 + (options.memory ? 3 : 0) + (options.recompute ? 3 : 0) + (options.offload ? 2 : 0);
  return static_cast<int64_t>(p.num_stages()) * p.num_microbatches * per_microbatch <= 100000;
}

Status cp_sat_available() {
  const Library& lib = library();
  return lib.solve ? Status::Ok() : Status::Invalid(lib.error);
}

namespace {

// The model written: its grid, its variables and the CpModelProto, hint and neighbourhood included.
struct Built {
  Grid g;
  Vars v;
  ModelWriter m;
};

Built build(const Problem& p, const CpSatOptions& options) {
  Built b;
  b.g = make_grid(p, options.memory && options.recompute, options.memory && options.offload, options.unit_us,
                  /*transfers_round_up=*/false);
  b.v = write_model(p, b.g, options, &b.m);
  if (options.hint) write_hint(p, b.g, *options.hint, b.v, /*fifo=*/!options.keep, &b.m);
  if (options.hint && options.keep) write_keep(p, b.g, *options.hint, *options.keep, b.v, &b.m);
  return b;
}

}  // namespace

std::string cp_sat_model_bytes(const Problem& p, const CpSatOptions& options) { return build(p, options).m.bytes(); }

CpSatSolution solve_cp_sat(const Problem& p, const CpSatOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  CpSatSolution out;
  out.status = check_problem(p);
  if (out.status.ok()) out.status = check_no_recompute_layers(p);
  if (out.status.ok()) out.status = cp_sat_available();
  if (out.status.ok() && !cp_sat_model_fits(p, options))
    out.status = Status::Invalid("the CP-SAT model is too large (over 10^5 intervals and memory events)");
  if (!out.status.ok()) return out;
  for (const DeviceSpec& d : p.devices)
    if (options.memory && d.static_bytes > d.mem_budget_bytes) {
      out.status = Status::Infeasible("a device's static memory exceeds its budget");
      return out;
    }
  const Built b = build(p, options);
  const Grid& g = b.g;
  const Vars& v = b.v;
  const ModelWriter& m = b.m;
  const std::string params = parameters(options);
  void* raw = nullptr;
  int raw_len = 0;
  library().solve(m.bytes().data(), static_cast<int>(m.bytes().size()), params.data(), static_cast<int>(params.size()),
                  &raw, &raw_len);
  const Response r = parse_response(static_cast<const char*>(raw), raw ? static_cast<size_t>(raw_len) : 0);
  std::free(raw);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.branches = r.branches;
  out.conflicts = r.conflicts;
  if (!r.ok || r.status == kModelInvalid) {
    out.status = Status::Internal("CP-SAT refused the model (" +
                                  std::string(r.ok ? "MODEL_INVALID" : "unreadable response") + ")");
    return out;
  }
  if (r.status == kInfeasible) {
    out.status = Status::Infeasible("the CP-SAT model has no solution: nothing fits the budget");
    out.proven_optimal = true;
    return out;
  }
  out.bound_us = r.bound * g.unit_us;
  out.bound_holds = !options.keep;  // every duration rounded down (grid.h)
  out.proven_optimal = r.status == kOptimal;
  if (r.status != kFeasible && r.status != kOptimal) {
    out.status = Status::TimeLimit("CP-SAT found no solution within its time limit");
    return out;
  }
  const int M = p.num_microbatches;
  auto value = [&](int var) { return r.solution.at(static_cast<size_t>(var)); };
  std::vector<Op> ops = g.ops;
  std::vector<TransferTimes> transfers;
  for (size_t k = 0; k < v.recompute.size(); k++) {
    const int s = static_cast<int>(k) / M, i = static_cast<int>(k) % M;
    if (v.recompute[k] >= 0 && value(v.recompute[k])) ops.push_back({OpKind::kR, s, i});
    if (v.offload[k] >= 0 && value(v.offload[k]))
      transfers.push_back({s, i, static_cast<double>(value(v.off_start[k])),
                           static_cast<double>(value(v.off_start[k]) + g.off_dur[s]),
                           static_cast<double>(value(v.rel_start[k]))});
  }
  auto start = [&](const Op& op) -> double {
    return static_cast<double>(op.kind == OpKind::kR ? value(v.r_start[op.stage * M + op.microbatch])
                                                     : value(v.start[g.index[op_id(p, op)]]));
  };
  ReadBack back = read_back(p, g, ops, start, std::move(transfers), "CP-SAT");
  out.schedule = std::move(back.schedule);
  out.objective_us = back.objective_us;
  out.status = back.status;
  return out;
}

}  // namespace optpipe
