// CP-SAT's model as optpipe writes it (private to cp_sat.cpp and cp_sat_model.cpp): the field
// numbers of its wire format, a writer of CpModelProto, and the model of cp_sat.h — variables,
// constraints, a hint and a neighbourhood — written into it. Nothing here talks to CP-SAT.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "exact/grid.h"
#include "exact/protobuf_wire.h"
#include "optpipe/cp_sat.h"

namespace optpipe {

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

// A linear expression Σ coeff·var + offset.
struct Expr {
  std::vector<int64_t> vars, coeffs;
  int64_t offset = 0;
};
inline Expr var_plus(int v, int64_t offset) { return {{v}, {1}, offset}; }
inline Expr constant(int64_t c) { return {{}, {}, c}; }

inline wire::Writer expr_message(const Expr& e) {
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

// The model of cp_sat.h on the grid; the variables it made.
Vars write_model(const Problem& p, const Grid& g, const CpSatOptions& o, ModelWriter* m);
// The neighbourhood of `s`: the kept ops in its order on each device (a fused backward as B then
// W), the kept stage-microbatches' choices as in `s`.
void write_keep(const Problem& p, const Grid& g, const Schedule& s, const std::vector<bool>& keep, const Vars& v,
                ModelWriter* m);
// The hint: `s` simulated, its start times on the grid, its recompute and offload choices
// (write_hint's comment in cp_sat_model.cpp).
void write_hint(const Problem& p, const Grid& g, const Schedule& s, const Vars& v, bool fifo, ModelWriter* m);

}  // namespace optpipe
