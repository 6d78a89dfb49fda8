// The partition moves and the bound that holds over every partition.
#include "optimize/partition.h"

#include <algorithm>

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

double partition_free_lower_bound(const Problem& p, Objective objective) {
  const int D = p.num_devices, M = p.num_microbatches, S = p.num_stages();
  double items_work = 0, items_chain = 0, heaviest = 0;
  for (const LayerSpec& l : p.layers) {
    items_work += l.t_f_us + l.t_b_us + l.t_w_us;
    items_chain += l.t_f_us + l.t_b_us;
    heaviest = std::max(heaviest, l.t_f_us + l.t_b_us + l.t_w_us);
  }
  if (objective == Objective::kSpan) return std::max(M * items_work / D, M * heaviest);
  int hops = 0;  // changes of device along the stages, each crossed forward and backward
  for (int s = 1; s < S; s++) hops += p.device_of(s) != p.device_of(s - 1);
  // One microbatch: every forward, every input-gradient backward, the hops, then a W on stage 0
  // (which holds the first item at least).
  const double chain = items_chain + 2 * hops * p.t_comm_us + (p.layers.empty() ? 0 : p.layers.front().t_w_us);
  // Stages 0..D−1 sit on devices 0..D−1 in every placement: device d starts no sooner than the
  // forwards of the first d items and d hops. The latest device ends no sooner than the average.
  double starts = 0, first_items_f = 0;
  for (int d = 0; d < D; d++) {
    starts += first_items_f + d * p.t_comm_us;
    if (d < static_cast<int>(p.layers.size())) first_items_f += p.layers[d].t_f_us;
  }
  const double average = (M * items_work + starts) / D;
  return std::max({chain, average, M * heaviest});
}

}  // namespace optpipe
