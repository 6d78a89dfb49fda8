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

#include "exact/cp_sat_model.h"
#include "exact/grid.h"
#include "exact/protobuf_wire.h"
#include "optpipe/simulate.h"

#ifndef OPTPIPE_ORTOOLS_DIR
#define OPTPIPE_ORTOOLS_DIR ""
#endif

namespace optpipe {

namespace {

enum ResponseStatus { kUnknown = 0, kModelInvalid = 1, kFeasible = 2, kInfeasible = 3, kOptimal = 4 };

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
