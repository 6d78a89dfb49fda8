// The local search's moves (private to the optimizer): each changes one schedule at random —
// compute ops reordered, backwards split or fused, activations kept, offloaded or recomputed,
// reloads issued earlier or later, W's deferred in the cool-down — keeping to the rules.
#pragma once

#include <cstddef>
#include <memory>
#include <random>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/schedule_rules.h"

namespace optpipe {

// The offsets o at which a device's compute order repeats the window ops[lo..hi] k microbatches
// on (k = 1, 2, … and −1, −2, …, each way until the pattern breaks): ops[t + o] is ops[t] with its
// microbatch + k for every t in the window, and no two windows overlap. The search's tiled moves
// make the change a move makes in the window at every such offset too.
std::vector<int> window_repeats(const std::vector<Op>& ops, int lo, int hi, int num_microbatches);

// The cool-down reorder of one device's compute order the search's moves make: from its k-th
// last backward (a fused BW with split_fused, else a B) on, each W moved after the next `later`
// backwards, those past the last one to the end, order kept; with split_fused each fused BW there
// split, its W moved so. Returns the index the reorder began at, ops.size() when nothing changed.
size_t defer_cooldown_ws(std::vector<Op>& ops, int k, int later, bool split_fused);

// Draws and applies the search's moves, with the scratch state they keep from move to move.
class Mover {
 public:
  Mover(const Problem& p, const ScheduleRules& rules, std::mt19937_64& rng);
  ~Mover();
  // Applies one random move to s; false if the move found nothing to do.
  bool random_move(Schedule& s);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optpipe
