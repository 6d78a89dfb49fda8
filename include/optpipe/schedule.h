// schedule.h — a pipeline schedule: what each device runs, in which order. No times.
//
// Per device: the ordered compute ops (F, B, W, BW, R), the ordered offloads, and the ordered
// reloads, each reload anchored to the compute op whose start releases it (and optionally held
// until another op of the device has finished). The simulator derives all times from this, so the
// solver, simulator, exporters and runtime read one meaning.
//
// Which activations are offloaded or recomputed is part of the schedule itself: F(s,i) is
// offloaded iff Offload(s,i) appears, recomputed iff R(s,i) appears; B(s,i)+W(s,i) or a fused
// BW(s,i) finishes the backward. A Wait(s,i) in the compute list holds the compute stream until
// Offload(s,i) has finished (a stream waiting on the copy's event): it is how a schedule says an
// allocation must wait for an offload to make room, since otherwise every op starts as soon as
// its inputs and stream allow.
//
//   Schedule s = ...;                       // from a family or the optimizer
//   s.devices[0].compute.push_back({OpKind::kF, /*stage=*/0, /*microbatch=*/0});
//   int id = op_id(problem, op);            // dense index shared by simulator arrays
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"

namespace optpipe {

// Append new kinds at the end: op ids depend on the numbering.
enum class OpKind : uint8_t { kF = 0, kB, kW, kBW, kR, kOffload, kReload, kWait };
constexpr int kNumOpKinds = 8;

const char* op_kind_name(OpKind k);  // "F", "B", "W", "BW", "R", "OFFLOAD", "RELOAD", "WAIT"
// F, B, W, BW, R and WAIT are on the compute stream
inline bool is_compute(OpKind k) { return k != OpKind::kOffload && k != OpKind::kReload; }

struct Op {
  OpKind kind = OpKind::kF;
  int32_t stage = 0;
  int32_t microbatch = 0;

  bool operator==(const Op& o) const { return kind == o.kind && stage == o.stage && microbatch == o.microbatch; }
  bool operator!=(const Op& o) const { return !(*this == o); }
};

// How long the op runs at the profile's timings: F, B, W, BW (B + W) and R on the compute
// stream, OFFLOAD and RELOAD on the host link (Problem::offload_us, reload_us); WAIT takes none.
double op_duration_us(const Problem& p, const Op& op);

// "F3 s1": forward of microbatch 3 on stage 1. Also used in messages and the JSON format.
std::string op_name(const Op& op);
bool parse_op_name(const std::string& text, Op* out);

struct ReloadEntry {
  Op reload;  // kind kReload
  Op anchor;  // a compute op on the same device, before the B/BW this reload feeds
  // Ops of the same device that must have finished first — offloads, or compute ops before the
  // B/BW this reload feeds — because what they free makes the room this reload needs (a copy
  // stream waiting on their events).
  std::vector<Op> after;
};

struct DeviceSchedule {
  std::vector<Op> compute;
  std::vector<Op> offloads;          // kind kOffload
  std::vector<ReloadEntry> reloads;  // in issue order on the host-to-device channel
};

struct Schedule {
  // The stage→device map the schedule was made for; it must match the problem's.
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;
  std::vector<DeviceSchedule> devices;  // one per device
  // The partition it was made for, items (the embedding and head included) per stage; empty:
  // the problem's own cut. A partition changes stage costs, never ops (problem_for applies it).
  std::vector<int> items_per_stage;

  size_t num_ops() const;
};

// Dense id: kind·S·M + stage·M + microbatch. Arrays of size num_op_ids(p) index by it.
inline int op_id(int num_stages, int num_microbatches, const Op& op) {
  return (static_cast<int>(op.kind) * num_stages + op.stage) * num_microbatches + op.microbatch;
}
inline int op_id(const Problem& p, const Op& op) { return op_id(p.num_stages(), p.num_microbatches, op); }
inline int num_op_ids(const Problem& p) { return kNumOpKinds * p.num_stages() * p.num_microbatches; }
inline Op op_from_id(const Problem& p, int id) {
  const int M = p.num_microbatches, S = p.num_stages();
  return Op{static_cast<OpKind>(id / (S * M)), (id / M) % S, id % M};
}

// The problem a schedule runs on: `p` re-cut (rechunk) to the schedule's placement and chunks, and
// to its items per stage when it names them, or `p` itself when they match. How a schedule made for another placement
// of the same model (a V-shape schedule, a linear problem) is read everywhere.
Result<Problem> problem_for(const Problem& p, const Schedule& s);

// Whether some device offloads; whether some compute list holds an op of `kind`.
bool has_offloads(const Schedule& s);
bool has_compute_op(const Schedule& s, OpKind kind);

// Editing a device's lists (src/schedule/edit.cpp).
// Position of `op` in `ops`, or −1.
int find_op(const std::vector<Op>& ops, const Op& op);
// Position of the backward (B or fused BW) of (stage, microbatch) in a compute list, or −1.
int backward_index(const std::vector<Op>& compute, int stage, int microbatch);
// Offloads F(stage, microbatch)'s activation on `ds`, reloaded when the compute stream reaches
// compute[anchor]; both channel lists stay in compute order (offloads by their forward, reloads
// by their backward).
void insert_offload(DeviceSchedule& ds, int stage, int microbatch, int anchor);
// The same for several activations at once, in one pass over the lists (one pass per activation
// made offloading every activation of a device quadratic in its ops).
struct OffloadAt {
  int stage, microbatch;
  Op anchor;  // the compute op whose start releases the reload
};
void insert_offloads(DeviceSchedule& ds, const std::vector<OffloadAt>& adds);
// Keeps F(stage, microbatch)'s activation on the device again: its offload, reload and wait go,
// and no reload waits for that offload any more.
void remove_offload(DeviceSchedule& ds, int stage, int microbatch);
// Where reloads name `from` (as their anchor or as an op to wait for), they name `to` instead:
// for a compute op whose kind changes (a backward split or fused).
void rename_in_reloads(DeviceSchedule& ds, const Op& from, const Op& to);

}  // namespace optpipe
