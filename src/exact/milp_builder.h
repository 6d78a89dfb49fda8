// The MILP builder's shared parts (private to src/exact): what every part of the model reads, the
// small helpers that add columns and terms, and the per-device orders and memory the memory rows
// build on. milp_model.cpp adds the columns, precedences, transfers and orders; milp_memory.cpp
// the memory rows.
#pragma once

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "optpipe/milp.h"

namespace optpipe::milp_build {

// A compute op that starts this much after a reload counts as after it; at equal times the
// simulator has both allocations.
constexpr double kTieUs = 1e-3;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Memory rows are in MiB, which keeps their coefficients near the others' magnitude.
constexpr double kMiB = 1 << 20;

// What every part of the model reads, and the model they add to. The parts add their columns and
// rows in one fixed order: CBC's search depends on it.
struct Builder {
  const Problem& p;
  const MilpOptions& options;
  int S = 0, M = 0, D = 0;
  bool recompute = false, offload = false;  // decided by the model (only with memory)
  double horizon_us = 0;                    // big-M and time bound
  MilpModel m;
  std::vector<std::vector<Op>> ops;  // per device: its F, B, W by stage, kind, microbatch
};

inline double op_us(const Problem& p, OpKind k, int s) { return op_duration_us(p, Op{k, s, 0}); }
inline double hop_us(const Problem& p, int a, int b) { return p.device_of(a) == p.device_of(b) ? 0.0 : p.t_comm_us; }
// What a recompute of stage s frees between F and R.
inline int64_t dropped_bytes(const Problem& p, int s) { return p.stages[s].act_f_bytes - p.stages[s].act_input_bytes; }
inline int64_t act_delta_bytes(const StageSpec& h, OpKind k) {
  return k == OpKind::kF ? h.act_f_bytes : k == OpKind::kB ? h.act_b_bytes : h.act_w_bytes;
}
inline int64_t ws_bytes(const StageSpec& h, OpKind k) {
  return k == OpKind::kF ? h.ws_f_bytes : k == OpKind::kB ? h.ws_b_bytes : h.ws_w_bytes;
}

inline int add_col(Builder& mb, double lb, double ub, double obj, bool integer) {
  mb.m.col_lb.push_back(lb);
  mb.m.col_ub.push_back(ub);
  mb.m.objective.push_back(obj);
  mb.m.col_integer.push_back(integer);
  return static_cast<int>(mb.m.col_lb.size()) - 1;
}
inline int col(const Builder& mb, const Op& op) { return mb.m.start_col[op_id(mb.p, op)]; }
inline int rcol(const Builder& mb, const Op& op) {
  if (op.kind != OpKind::kF && op.kind != OpKind::kB) return -1;
  return mb.m.recompute_col[op.stage * mb.M + op.microbatch];
}
inline void add_mib_term(MilpRow& row, int c, double coef) {
  row.cols.push_back(c);
  row.coefs.push_back(coef / kMiB);
}

// A B op's block is R + B: its end moves by t_R when it recomputes.
inline void extend_block(const Builder& mb, MilpRow& row, const Op& a) {
  if (a.kind == OpKind::kB && rcol(mb, a) >= 0) {
    row.cols.push_back(rcol(mb, a));
    row.coefs.push_back(-mb.p.stages[a.stage].t_r_us);
  }
}

// start(y) − start(x) ≥ gap, where gap counts from x's start to its end (+ a hop)
inline void add_after(Builder& mb, const Op& x, const Op& y, double gap) {
  MilpRow row{{col(mb, y), col(mb, x)}, {1, -1}, gap, kInf};
  extend_block(mb, row, x);
  mb.m.rows.push_back(std::move(row));
}

// One device's ops and their orders: before[x][y] where the dependencies already put list[x]
// first, else pair_col[min(x,y)][max(x,y)], the binary that decides it.
struct DeviceOrders {
  int d = 0;
  const std::vector<Op>& list;
  int n = 0;
  std::vector<int> index_of;  // op id → position in list, −1 otherwise
  std::vector<std::vector<char>> before;
  std::vector<std::vector<int>> pair_col;
};

// What a device's memory rows share: its budget, its offloadable activations, and a big-M above
// any sum of its deltas (which switches a row off).
struct DeviceMemory {
  const DeviceSpec& dev;
  std::vector<int> offloaded_here;  // stage·M + microbatch with an offload binary, on this device
  double big = 0;
};

DeviceOrders implied_orders(const Builder& mb, int d);
void add_order_binaries(Builder& mb, DeviceOrders& o);
DeviceMemory device_memory(const Builder& mb, const DeviceOrders& o);
// Memory at every allocation (false status: a single op cannot fit) and at every reload.
Status add_allocation_rows(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem);
void add_reload_memory_rows(Builder& mb, const DeviceOrders& o, const DeviceMemory& mem);

}  // namespace optpipe::milp_build
