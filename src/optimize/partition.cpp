// The partition moves: items moved between stages while the schedule gets faster, and the cut
// with each device's lighter stage first.
#include "optimize/partition.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "optpipe/optimize.h"

namespace optpipe {

Repartitioned improve_partition(const Problem& p, const Schedule& s, const Score& start, const Scoring& scoring,
                                int64_t max_evaluations, std::chrono::steady_clock::time_point deadline) {
  Repartitioned out{p, start, 0, 0};
  std::vector<int> counts = items_per_stage(p);
  // Each round tries every move of one item from a stage a to a stage b (the stages between
  // keep their counts, each passing one item on) and takes the best; a round that improves
  // nothing ends it.
  for (bool improved = true; improved;) {
    improved = false;
    std::vector<int> best_counts;
    Problem best_problem;
    Score best_score = out.score;
    for (std::vector<int>& moved : one_item_moves(counts)) {
      if (out.evaluations >= max_evaluations || std::chrono::steady_clock::now() > deadline) return out;
      Result<Problem> q = with_partition(out.problem, moved);
      if (!q.ok()) continue;  // e.g. a stage's times past the limits
      Score sc;
      out.evaluations++;
      if (!score_schedule(q.value, s, &sc, scoring) || !(sc < best_score)) continue;
      best_score = sc;
      best_counts = std::move(moved);
      best_problem = std::move(q.value);
    }
    if (!best_counts.empty()) {
      counts = std::move(best_counts);
      out.problem = std::move(best_problem);
      out.score = best_score;
      out.moves++;
      improved = true;
    }
  }
  return out;
}

std::vector<int> lighter_first(const Problem& p) {
  std::vector<int> counts = items_per_stage(p);
  const int D = p.num_devices;
  if (p.num_stages() != 2 * D || p.placement == Placement::kLinear) return counts;
  for (int d = 0; d < D; d++) {
    const bool nested = p.placement == Placement::kVShape || p.placement == Placement::kWave;
    const int later = nested ? 2 * D - 1 - d : D + d;
    if (counts[d] > counts[later]) std::swap(counts[d], counts[later]);
  }
  return counts;
}

}  // namespace optpipe
