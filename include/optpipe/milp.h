// milp.h — the OptPipe paper's mixed-integer model, built as plain data, solved on CBC.
//
// Continuous start times for every F, B and W; a binary for each pair of ops on one device whose
// order nothing fixes (big-M disjunctions); memory checked at every allocation: static bytes
// plus the deltas of every op ordered before it, within the budget. Made tractable the paper's
// way: each stage runs its F's, B's and W's in microbatch order (first in, first out — no loss
// for identical microbatches), orders implied on a device are not variables, and a warm start
// and a time limit bound the solve. B and W are separate ops (a fused BW is B then W).
//
// With `recompute`, a binary per activation drops it after F and runs R just before B (one R+B
// block). With `offload`, a binary per activation and continuous start times for its offload and
// reload, one transfer at a time per direction of a host link (a big-M order binary per pair of
// transfers there); B starts after the reload ends. Memory is then also checked at every reload's
// start, and each check counts an offloaded activation as gone only where a binary says its
// offload ended by then, and as back where its reload started by then; the compute ops a reload
// check counts likewise get a binary each (started, or ended, by then). The schedule read back
// waits (WAIT ops) where an F or R started after an offload ended, and is settled in the
// simulator as the CP model's is (by_start.h).
//
//   Result<MilpModel> m = build_milp(problem, {.memory = true});
//   MilpSolution s = solve_milp(problem, m.value, {.time_limit_s = 30}, &warm_start);
//   // when s.status.ok(): s.schedule is the solution; s.proven_optimal says whether its
//   // s.objective_us meets s.bound_us
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/optimize.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct MilpOptions {
  bool memory = true;  // false: orders only — the solve's bound then holds for every schedule of the placement
  double time_limit_s = 10;
  // Branch-and-bound nodes at most (0: no limit). With one thread a node limit makes the solve
  // deterministic, which a time limit does not: tests use it.
  int64_t max_nodes = 0;
  int threads = 1;
  double horizon_us = 0;   // big-M and time bound; 0: all work and hops in sequence
  bool recompute = false;  // with memory: also decide which activations to recompute
  bool offload = false;    // with memory: also decide which to offload, and when to move them
};

struct MilpRow {
  std::vector<int> cols;
  std::vector<double> coefs;
  double lb, ub;  // −/+ infinity for one-sided rows
};

struct MilpModel {
  std::vector<double> col_lb, col_ub, objective;
  std::vector<char> col_integer;
  std::vector<MilpRow> rows;
  std::vector<int> start_col;      // by op id: the start-time column of F/B/W ops (B: of R+B), −1 otherwise
  std::vector<int> recompute_col;  // by stage·M + microbatch: the recompute binary, −1 when none
  // By stage·M + microbatch, −1 when none: the offload binary, the offload's and the reload's
  // start times (when not offloaded: F's end and the horizon).
  std::vector<int> offload_col, offload_start_col, reload_start_col;
  int makespan_col = -1;
  // For warm starts: each order binary says "a before b" when 1.
  struct Pair {
    int col;
    Op a, b;
  };
  std::vector<Pair> pairs;
  // w = (z or 1 − z) · r, linearised: for warm starts.
  struct Product {
    int col, z_col, r_col;
    bool z_complemented;
  };
  std::vector<Product> products;
  size_t num_binaries() const;  // every integer column
};

Result<MilpModel> build_milp(const Problem& p, const MilpOptions& options);

// Order binaries any model of p has, from the problem alone: on each stage, a forward and the
// backward of an earlier microbatch are ordered by nothing, so each such pair needs one — a
// lower bound to check before building a model that could run to millions of binaries.
size_t milp_min_binaries(const Problem& p);

struct [[nodiscard]] MilpSolution {
  // Infeasible: proven that nothing fits; TimeLimit: none found within the time or node limit;
  // Internal: the solution's transfers overflow when simulated.
  Status status;
  bool proven_optimal = false;
  double objective_us = 0;  // the makespan of the solver's solution
  double bound_us = 0;      // the solver's proven lower bound on the model's optimum
  Schedule schedule;        // ops ordered by their start times
  int64_t nodes = 0;
  double wall_s = 0;
};

// warm_start: a schedule of p without offloads (fused BW allowed; each R just before its B, and
// only when the model decides recomputes), or nullptr.
MilpSolution solve_milp(const Problem& p, const MilpModel& m, const MilpOptions& options, const Schedule* warm_start);

}  // namespace optpipe
