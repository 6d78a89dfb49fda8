// Local search over one placement's schedules (private to the optimizer): moves that reorder
// compute ops, split or fuse backwards, and switch activations between kept, offloaded and
// recomputed; every candidate scored by the simulator.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/simulate.h"

namespace optpipe {

// Lexicographic: bytes over budget (summed over devices) first, then makespan, then the sum of
// the devices' finishing times — which moves when the makespan does not, and so leads a search
// across the makespan's plateaus.
struct Score {
  double overflow_bytes = 0;  // a double: summed over devices it could pass int64
  double makespan_us = 0;
  double sum_end_us = 0;
  bool operator<(const Score& o) const {
    if (overflow_bytes != o.overflow_bytes) return overflow_bytes < o.overflow_bytes;
    if (makespan_us != o.makespan_us) return makespan_us < o.makespan_us;
    return sum_end_us < o.sum_end_us;
  }
  bool operator<=(const Score& o) const { return !(o < *this); }
};

// Duration factors by op id, one vector per sample (NoiseSampler): with them a schedule is scored
// by the p90 of its makespan over those samples, as gated to fit under any timing.
using NoiseSamples = std::vector<std::vector<double>>;

// The nominal score of a schedule already simulated (its timeline's figures).
Score score_of(const Problem& p, const Timeline& t);

// False when the schedule deadlocks (or is otherwise not simulable). With `noise`, a schedule that
// fits scores the p90 of its gated makespan over the samples (its overflow stays the nominal one:
// gating makes a nominal fit a fit under any timing).
bool score_schedule(const Problem& p, const Schedule& s, Score* out, const NoiseSamples* noise = nullptr);

struct [[nodiscard]] SearchResult {
  Schedule best;
  Score best_score;
  int64_t evaluations = 0;
  int64_t improvements = 0;
};

// Position of `op` in `ops`, or −1.
int find_op(const std::vector<Op>& ops, const Op& op);

// Position of the backward (B or fused BW) of (stage, microbatch) in a compute list, or −1.
int backward_index(const std::vector<Op>& compute, int stage, int microbatch);

// Offloads F(stage, microbatch)'s activation on `ds`, reloaded when the compute stream reaches
// compute[anchor]; both channel lists stay in compute order (offloads by their forward, reloads
// by their backward).
void insert_offload(DeviceSchedule& ds, int stage, int microbatch, int anchor);

// Keeps F(stage, microbatch)'s activation on the device again: its offload, reload and wait go,
// and no reload waits for that offload any more.
void remove_offload(DeviceSchedule& ds, int stage, int microbatch);

// Offloads or recomputes activations alive at overflowing peaks (with every_overflow: at every
// overflow) until the schedule fits, or nothing alive there is left to move, or max_rounds
// simulations are spent, or the deadline passes. Returns the changed schedule.
Schedule repair_memory(const Problem& p, const Schedule& start, int max_rounds, bool every_overflow = false,
                       std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// What a running search shares with whoever watches it.
struct SearchShared {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> evaluations{0};
  std::atomic<double> best_fitting_makespan_us{0};  // 0: nothing that fits yet
};

// Improves `start` for at most max_evaluations simulated candidates, or until shared.stop is
// set. Deterministic for a given seed when not stopped early.
SearchResult local_search(const Problem& p, const Schedule& start, uint64_t seed, int64_t max_evaluations,
                          SearchShared& shared, const NoiseSamples* noise = nullptr);

// Takes out the recomputes, then the offloads, that the schedule does not need: each, the last
// first, if without it the schedule overflows no more and ends no later. The search's plateau
// walk leaves such ones behind; they cost compute and link time that the simulator's makespan
// does not show. At most `max_evaluations` simulations, and none after `deadline`.
struct [[nodiscard]] Tidied {
  Schedule schedule;
  int recomputes_dropped = 0, offloads_dropped = 0;
};
Tidied drop_needless(const Problem& p, const Schedule& s, int64_t max_evaluations,
                     std::chrono::steady_clock::time_point deadline, const NoiseSamples* noise = nullptr);

}  // namespace optpipe
