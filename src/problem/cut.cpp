// Cutting a model's items into stages: practitioners' partition rules, optpipe's balanced cut,
// re-cutting for another placement, and the one-item moves the optimizer searches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "optpipe/problem.h"

namespace optpipe {

void cut_layers(const std::vector<int>& counts, Problem* p) {
  OPTPIPE_CHECK(static_cast<int>(counts.size()) == p->num_stages(), "one layer count per stage");
  p->stages.assign(counts.size(), StageSpec{});
  for (DeviceSpec& d : p->devices) d.static_bytes = 0;
  size_t next = 0;
  for (size_t s = 0; s < counts.size(); s++) {
    OPTPIPE_CHECK(counts[s] >= 1 && next + counts[s] <= p->layers.size(), "layer counts cover the layers");
    StageSpec& st = p->stages[s];
    st.num_layers = counts[s];
    st.act_input_bytes = p->layers[next].act_input_bytes;
    for (int k = 0; k < counts[s]; k++, next++) {
      const LayerSpec& l = p->layers[next];
      st.t_f_us += l.t_f_us;
      st.t_b_us += l.t_b_us;
      st.t_w_us += l.t_w_us;
      st.t_r_us += l.t_r_us;
      st.act_f_bytes += l.act_f_bytes;
      st.act_w_bytes += l.act_w_bytes;
      p->devices[p->device_of(static_cast<int>(s))].static_bytes += l.static_bytes;
    }
    st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    st.act_input_bytes = std::min(st.act_input_bytes, st.act_f_bytes);
  }
  OPTPIPE_CHECK(next == p->layers.size(), "layer counts cover the layers");
}

bool same_placement(const Problem& a, const Problem& b) {
  return a.placement == b.placement && a.chunks_per_device == b.chunks_per_device;
}

bool layers_match(const Problem& p) {
  if (p.layers.empty()) return false;
  Problem q = p;
  std::vector<int> counts;
  size_t total = 0;
  for (const StageSpec& st : p.stages) {
    counts.push_back(st.num_layers);
    total += st.num_layers;
    if (st.recompute_layers > 0 || st.ws_f_bytes || st.ws_b_bytes || st.ws_w_bytes) return false;
  }
  if (total != p.layers.size()) return false;
  cut_layers(counts, &q);
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); };
  for (size_t s = 0; s < p.stages.size(); s++) {
    const StageSpec &a = p.stages[s], &b = q.stages[s];
    if (!close(a.t_f_us, b.t_f_us) || !close(a.t_b_us, b.t_b_us) || !close(a.t_w_us, b.t_w_us) ||
        !close(a.t_r_us, b.t_r_us) || a.act_f_bytes != b.act_f_bytes || a.act_w_bytes != b.act_w_bytes ||
        a.act_input_bytes != b.act_input_bytes)
      return false;
  }
  for (int d = 0; d < p.num_devices; d++)
    if (p.devices[d].static_bytes != q.devices[d].static_bytes) return false;
  return true;
}

std::vector<int> min_max_split(int items, int runs, int least,
                               const std::function<double(int first, int end, int run)>& run_cost) {
  const double inf = std::numeric_limits<double>::infinity();
  // best[c][k]: the smallest largest run putting the first k items into runs 0..c.
  std::vector<std::vector<double>> best(runs, std::vector<double>(items + 1, inf));
  std::vector<std::vector<int>> cut(runs, std::vector<int>(items + 1, 0));
  for (int k = least; k <= items; k++) best[0][k] = run_cost(0, k, 0);
  for (int c = 1; c < runs; c++)
    for (int k = 0; k <= items; k++)
      for (int j = 0; j <= k - least; j++) {
        const double v = std::max(best[c - 1][j], run_cost(j, k, c));
        if (v < best[c][k]) {
          best[c][k] = v;
          cut[c][k] = j;
        }
      }
  std::vector<int> lengths(runs);
  for (int c = runs - 1, k = items; c >= 0; c--) {
    const int j = c > 0 ? cut[c][k] : 0;
    lengths[c] = k - j;
    k = j;
  }
  return lengths;
}

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::kLayer: return "layer";
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kHead: return "head";
  }
  return "?";
}

namespace {

// PartitionRule::kDevices from the balanced cut `counts`.
void balance_devices(const Problem& p, std::vector<int>* counts) {
  const int S = p.num_stages();
  std::vector<double> item_work;
  for (const LayerSpec& l : p.layers) item_work.push_back(l.t_f_us + l.t_b_us + l.t_w_us);
  auto measure = [&](const std::vector<int>& c) {
    std::vector<double> device(p.num_devices, 0);
    for (int s = 0, next = 0; s < S; s++)
      for (int k = 0; k < c[s]; k++) device[p.device_of(s)] += item_work[next++];
    double most = 0, squares = 0;
    for (double w : device) most = std::max(most, w), squares += w * w;
    return std::pair{most, squares};
  };
  auto current = measure(*counts);
  // Every accepted move lowers (busiest, squares) strictly, so no cut repeats; the cap bounds it.
  for (int step = 0; step < 100000; step++) {
    std::vector<int> best;
    auto best_measure = current;
    for (std::vector<int>& moved : one_item_moves(*counts)) {
      const auto m = measure(moved);
      if (m < best_measure) best_measure = m, best = std::move(moved);
    }
    if (best.empty()) return;
    *counts = std::move(best);
    current = best_measure;
  }
}

}  // namespace

const char* partition_rule_name(PartitionRule r) {
  switch (r) {
    case PartitionRule::kBalanced: return "balanced";
    case PartitionRule::kEven: return "even";
    case PartitionRule::kEvenAccounted: return "even-accounted";
    case PartitionRule::kDevices: return "devices";
  }
  return "?";
}

bool parse_partition_rule(const std::string& name, PartitionRule* out) {
  for (PartitionRule r :
       {PartitionRule::kBalanced, PartitionRule::kEven, PartitionRule::kEvenAccounted, PartitionRule::kDevices})
    if (name == partition_rule_name(r)) {
      *out = r;
      return true;
    }
  return false;
}

Result<std::vector<int>> partition_counts(const Problem& p, PartitionRule rule) {
  using R = Result<std::vector<int>>;
  const int S = p.num_stages();
  const int items = static_cast<int>(p.layers.size());
  if (items == 0) return R::Error(Status::Invalid("the problem has no layers to partition (only the cost model's do)"));
  const bool embedding = p.layers.front().kind == LayerKind::kEmbedding;
  const bool head = p.layers.back().kind == LayerKind::kHead;
  const int L = items - embedding - head;  // transformer layers
  std::vector<int> layers(S, 0);           // transformer layers per stage
  if (rule == PartitionRule::kBalanced || rule == PartitionRule::kDevices) {
    // Over transformer layers, each stage at least one while there are enough, the embedding's
    // and head's work counted with the first and last stage.
    std::vector<double> prefix(L + 1, 0);
    auto work = [&](const LayerSpec& l) { return l.t_f_us + l.t_b_us + l.t_w_us; };
    for (int k = 0; k < L; k++) prefix[k + 1] = prefix[k] + work(p.layers[embedding + k]);
    const double first = embedding ? work(p.layers.front()) : 0, last = head ? work(p.layers.back()) : 0;
    layers = min_max_split(L, S, L >= S ? 1 : 0, [&](int a, int b, int run) {
      return prefix[b] - prefix[a] + (run == 0 ? first : 0) + (run == S - 1 ? last : 0);
    });
  } else {
    // Even: L / S a stage, spare layers from the second stage on. Accounted: the embedding and
    // the head count as a layer each, and the first and last stage hold one layer less.
    const bool accounted = rule == PartitionRule::kEvenAccounted;
    const int total = L + (accounted ? embedding + head : 0);
    std::vector<int> share(S, total / S);
    for (int c = 0; c < total % S; c++) share[(accounted ? c : 1 + c % std::max(1, S - 1)) % S]++;
    if (S == 1) share[0] = total;
    for (int c = 0; c < S; c++)
      layers[c] = share[c] - (accounted && c == 0 ? embedding : 0) - (accounted && c == S - 1 ? head : 0);
    for (int c = 0; c < S; c++)
      if (layers[c] < 0)
        return R::Error(Status::Invalid(std::string("partition ") + partition_rule_name(rule) + ": " +
                                        std::to_string(L) + " layers are too few for " + std::to_string(S) +
                                        " stages with the embedding and head counted as layers"));
  }
  std::vector<int> counts = layers;
  counts.front() += embedding;
  counts.back() += head;
  for (int c = 0; c < S; c++)
    if (counts[c] < 1)
      return R::Error(Status::Invalid(std::string("partition ") + partition_rule_name(rule) + ": cannot give " +
                                      std::to_string(S) + " stages an item each from " + std::to_string(items)));
  if (rule == PartitionRule::kDevices) balance_devices(p, &counts);
  return R::Of(std::move(counts));
}

Result<Problem> with_partition(const Problem& p, const std::vector<int>& items_per_stage) {
  using R = Result<Problem>;
  if (p.layers.empty())
    return R::Error(Status::Invalid("the problem has no layers to partition (only the cost model's do)"));
  if (static_cast<int>(items_per_stage.size()) != p.num_stages())
    return R::Error(Status::Invalid("layers per stage: " + std::to_string(items_per_stage.size()) + " counts for " +
                                    std::to_string(p.num_stages()) + " stages"));
  int64_t sum = 0;
  for (size_t s = 0; s < items_per_stage.size(); s++) {
    if (items_per_stage[s] < 1)
      return R::Error(Status::Invalid("layers per stage: stage " + std::to_string(s) + " gets " +
                                      std::to_string(items_per_stage[s]) + "; every stage holds at least one item"));
    sum += items_per_stage[s];
  }
  if (sum != static_cast<int64_t>(p.layers.size()))
    return R::Error(Status::Invalid("layers per stage: they sum to " + std::to_string(sum) + ", the model has " +
                                    std::to_string(p.layers.size()) + " items (the embedding and head included)"));
  if (Status st = check_no_recompute_layers(p); !st.ok()) return R::Error(st);
  Problem q = p;
  cut_layers(items_per_stage, &q);
  Status st = check_problem(q);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(q));
}

std::vector<std::vector<int>> one_item_moves(const std::vector<int>& items_per_stage) {
  const int S = static_cast<int>(items_per_stage.size());
  std::vector<std::vector<int>> out;
  for (int a = 0; a < S; a++)
    for (int b = 0; b < S; b++) {
      if (a == b || items_per_stage[a] < 2) continue;
      out.push_back(items_per_stage);
      out.back()[a]--;
      out.back()[b]++;
    }
  return out;
}

std::vector<int> items_per_stage(const Problem& p) {
  std::vector<int> out;
  for (const StageSpec& st : p.stages) out.push_back(st.num_layers);
  return out;
}

std::vector<int> transformer_layers_per_stage(const Problem& p) {
  std::vector<int> out = items_per_stage(p);
  if (p.layers.empty()) return out;
  if (p.layers.front().kind == LayerKind::kEmbedding) out.front()--;
  if (p.layers.back().kind == LayerKind::kHead) out.back()--;
  return out;
}

Result<Problem> rechunk(const Problem& p, Placement placement, int chunks_per_device) {
  if (chunks_per_device < 1 || chunks_per_device > 64 || (placement == Placement::kLinear && chunks_per_device != 1) ||
      (placement == Placement::kVShape && chunks_per_device != 2))
    return Result<Problem>::Error(
        Status::Invalid(std::string("cannot re-cut for placement ") + placement_name(placement) + " with " +
                        std::to_string(chunks_per_device) +
                        " chunk(s) per device (linear: 1, vshape: 2, interleaved and wave: 1 to 64)"));
  if (Status st = check_no_recompute_layers(p); !st.ok()) return Result<Problem>::Error(st);
  if (placement == p.placement && chunks_per_device == p.chunks_per_device) return Result<Problem>::Of(p);
  Problem q = p;
  q.placement = placement;
  q.chunks_per_device = chunks_per_device;
  q.stages.clear();
  const int from = p.num_stages(), to = q.num_stages();
  if (layers_match(p)) {
    if (to > static_cast<int>(p.layers.size()))
      return Result<Problem>::Error(Status::Invalid("cannot cut " + std::to_string(p.layers.size()) + " layers into " +
                                                    std::to_string(to) + " stages"));
    Result<std::vector<int>> counts = partition_counts(q, p.partition);
    if (!counts.ok()) return Result<Problem>::Error(counts.status);
    cut_layers(counts.value, &q);
    Status st = check_problem(q);
    if (!st.ok()) return Result<Problem>::Error(st);
    return Result<Problem>::Of(std::move(q));
  }
  q.layers.clear();  // stale: the stages were edited or re-measured
  if (from <= 0 || to <= 0 || (to % from != 0 && from % to != 0))
    return Result<Problem>::Error(Status::Invalid("cannot re-cut " + std::to_string(from) + " stages into " +
                                                  std::to_string(to) + ": neither divides the other"));
  if (to >= from) {
    const int k = to / from;
    for (const StageSpec& g : p.stages) {
      StageSpec piece = g;
      piece.t_f_us /= k;
      piece.t_b_us /= k;
      piece.t_w_us /= k;
      piece.t_r_us /= k;
      piece.act_f_bytes /= k;
      piece.act_w_bytes /= k;
      piece.act_b_bytes = -piece.act_f_bytes - piece.act_w_bytes;  // exact, whatever the rounding
      piece.act_input_bytes = std::min(g.act_input_bytes, piece.act_f_bytes);
      piece.ws_f_bytes /= k;
      piece.ws_b_bytes /= k;
      piece.ws_w_bytes /= k;
      piece.num_layers = std::max(1, (g.num_layers + k / 2) / k);
      for (int j = 0; j < k; j++) q.stages.push_back(piece);
    }
  } else {
    const int k = from / to;
    for (int s = 0; s < to; s++) {
      StageSpec m = p.stages[s * k];
      for (int j = 1; j < k; j++) {
        const StageSpec& g = p.stages[s * k + j];
        m.t_f_us += g.t_f_us;
        m.t_b_us += g.t_b_us;
        m.t_w_us += g.t_w_us;
        m.t_r_us += g.t_r_us;
        m.act_f_bytes += g.act_f_bytes;
        m.act_b_bytes += g.act_b_bytes;
        m.act_w_bytes += g.act_w_bytes;
        m.ws_f_bytes = std::max(m.ws_f_bytes, g.ws_f_bytes);
        m.ws_b_bytes = std::max(m.ws_b_bytes, g.ws_b_bytes);
        m.ws_w_bytes = std::max(m.ws_w_bytes, g.ws_w_bytes);
        m.num_layers += g.num_layers;
      }
      q.stages.push_back(m);
    }
  }
  Status st = check_problem(q);
  if (!st.ok()) return Result<Problem>::Error(st);
  return Result<Problem>::Of(std::move(q));
}

}  // namespace optpipe
