#include "optpipe/problem.h"

#include "optpipe/schedule.h"  // kNumOpKinds: op ids per stage and microbatch

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace optpipe {

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kLinear: return "linear";
    case Placement::kInterleaved: return "interleaved";
    case Placement::kVShape: return "vshape";
  }
  return "?";
}

bool parse_placement(const std::string& name, Placement* out) {
  for (Placement p : {Placement::kLinear, Placement::kInterleaved, Placement::kVShape}) {
    if (name == placement_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

double Problem::offload_us(int stage) const { return host_link.d2h_us(stages[stage].act_f_bytes); }

double Problem::reload_us(int stage) const { return host_link.h2d_us(stages[stage].act_f_bytes); }

double Problem::work_us(int device) const {
  double us = 0;
  for (int s = 0; s < num_stages(); s++)
    if (device_of(s) == device) us += num_microbatches * (stages[s].t_f_us + stages[s].t_b_us + stages[s].t_w_us);
  return us;
}

int64_t Problem::every_activation_bytes(int device) const {
  int64_t bytes = 0;
  for (int s = 0; s < num_stages(); s++)
    if (device_of(s) == device) bytes += stages[s].act_f_bytes * num_microbatches;
  return bytes;
}

namespace {

// Bytes beyond 1 PiB are certainly a mistake, and keeping them small keeps every sum in range.
constexpr int64_t kMaxBytes = int64_t{1} << 50;
constexpr double kMaxTimeUs = 1e12;
constexpr long kMaxOpIds = 50'000'000;  // simulator arrays are sized by this

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status bad(const std::string& field, const std::string& rule, const std::string& got) {
  return Status::Invalid(field + ": " + rule + ", got " + got);
}

Status check_time(const std::string& field, double v) {
  if (!std::isfinite(v) || v < 0 || v > kMaxTimeUs)
    return bad(field, "must be a finite number of µs in [0, 1e12]", num(v));
  return Status::Ok();
}

Status check_bytes(const std::string& field, int64_t v, bool may_be_negative) {
  if (v > kMaxBytes || v < (may_be_negative ? -kMaxBytes : 0))
    return bad(field, may_be_negative ? "must be within ±2^50 bytes" : "must be in [0, 2^50] bytes", std::to_string(v));
  return Status::Ok();
}

}  // namespace

Status check_problem(const Problem& p) {
  if (p.num_devices < 1 || p.num_devices > 4096)
    return bad("num_devices", "must be in [1, 4096]", std::to_string(p.num_devices));
  if (p.num_microbatches < 1 || p.num_microbatches > 100000)
    return bad("num_microbatches", "must be in [1, 100000]", std::to_string(p.num_microbatches));
  if (p.chunks_per_device < 1 || p.chunks_per_device > 64)
    return bad("chunks_per_device", "must be in [1, 64]", std::to_string(p.chunks_per_device));
  if (p.placement == Placement::kLinear && p.chunks_per_device != 1)
    return bad("chunks_per_device", "must be 1 with placement \"linear\"", std::to_string(p.chunks_per_device));
  if (p.placement == Placement::kVShape && p.chunks_per_device != 2)
    return bad("chunks_per_device", "must be 2 with placement \"vshape\"", std::to_string(p.chunks_per_device));
  const long ids = static_cast<long>(kNumOpKinds) * p.num_stages() * p.num_microbatches;
  if (ids > kMaxOpIds)
    return Status::Invalid("problem too large: " + std::to_string(kNumOpKinds) +
                           " op kinds × stages × microbatches = " + std::to_string(ids) + " exceeds " +
                           std::to_string(kMaxOpIds));
  Status st;
  if (!(st = check_time("t_comm_us", p.t_comm_us)).ok()) return st;

  const int S = p.num_stages();
  if (static_cast<int>(p.stages.size()) != S)
    return bad("stages", "must have num_devices × chunks_per_device = " + std::to_string(S) + " entries",
               std::to_string(p.stages.size()));
  for (int s = 0; s < S; s++) {
    const StageSpec& g = p.stages[s];
    const std::string f = "stages[" + std::to_string(s) + "].";
    if (!(st = check_time(f + "t_f_us", g.t_f_us)).ok()) return st;
    if (!(st = check_time(f + "t_b_us", g.t_b_us)).ok()) return st;
    if (!(st = check_time(f + "t_w_us", g.t_w_us)).ok()) return st;
    if (!(st = check_time(f + "t_r_us", g.t_r_us)).ok()) return st;
    if (!(st = check_bytes(f + "act_f_bytes", g.act_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "act_b_bytes", g.act_b_bytes, true)).ok()) return st;
    if (!(st = check_bytes(f + "act_w_bytes", g.act_w_bytes, true)).ok()) return st;
    if (!(st = check_bytes(f + "act_input_bytes", g.act_input_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_f_bytes", g.ws_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_b_bytes", g.ws_b_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_w_bytes", g.ws_w_bytes, false)).ok()) return st;
    if (g.num_layers < 1 || g.num_layers > 100000)
      return bad(f + "num_layers", "must be 1 to 100000", std::to_string(g.num_layers));
    if (g.recompute_layers < 0 || g.recompute_layers > g.num_layers)
      return bad(f + "recompute_layers", "must be 0 to num_layers (" + std::to_string(g.num_layers) + ")",
                 std::to_string(g.recompute_layers));
    if (g.act_b_bytes > 0 && g.recompute_layers == 0)
      return bad(f + "act_b_bytes", "must be ≤ 0 (B frees memory unless it reruns layers for W)",
                 std::to_string(g.act_b_bytes));
    if (g.act_w_bytes > 0) return bad(f + "act_w_bytes", "must be ≤ 0 (W frees memory)", std::to_string(g.act_w_bytes));
    const int64_t sum = g.act_f_bytes + g.act_b_bytes + g.act_w_bytes;
    if (sum != 0)
      return bad(f + "act_b_bytes", "act_f_bytes + act_b_bytes + act_w_bytes must be 0",
                 "a sum of " + std::to_string(sum));
    if (g.act_input_bytes > g.act_f_bytes)
      return bad(f + "act_input_bytes", "must not exceed act_f_bytes (" + std::to_string(g.act_f_bytes) + ")",
                 std::to_string(g.act_input_bytes));
  }

  if (static_cast<int>(p.devices.size()) != p.num_devices)
    return bad("devices", "must have num_devices = " + std::to_string(p.num_devices) + " entries",
               std::to_string(p.devices.size()));
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceSpec& dev = p.devices[d];
    const std::string f = "devices[" + std::to_string(d) + "].";
    if (!(st = check_bytes(f + "static_bytes", dev.static_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "mem_budget_bytes", dev.mem_budget_bytes, false)).ok()) return st;
    if (dev.host_link < 0 || dev.host_link >= p.num_devices)
      return bad(f + "host_link", "must be in [0, num_devices)", std::to_string(dev.host_link));
  }
  for (size_t k = 0; k < p.layers.size(); k++) {
    const LayerSpec& l = p.layers[k];
    const std::string f = "layers[" + std::to_string(k) + "].";
    if (!(st = check_time(f + "t_f_us", l.t_f_us)).ok()) return st;
    if (!(st = check_time(f + "t_b_us", l.t_b_us)).ok()) return st;
    if (!(st = check_time(f + "t_w_us", l.t_w_us)).ok()) return st;
    if (!(st = check_time(f + "t_r_us", l.t_r_us)).ok()) return st;
    if (!(st = check_bytes(f + "act_f_bytes", l.act_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "act_input_bytes", l.act_input_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "static_bytes", l.static_bytes, false)).ok()) return st;
    if (l.act_w_bytes > 0 || l.act_w_bytes < -l.act_f_bytes)
      return bad(f + "act_w_bytes", "must be in [-act_f_bytes, 0]", std::to_string(l.act_w_bytes));
    if ((l.kind == LayerKind::kEmbedding && k != 0) || (l.kind == LayerKind::kHead && k + 1 != p.layers.size()))
      return bad(f + "kind", "the embedding comes first and the head last", layer_kind_name(l.kind));
  }
  // Every byte total the simulator forms (static + all activations of a device, summed over
  // devices) must stay far inside int64.
  double total = 0;
  for (const DeviceSpec& dev : p.devices) total += static_cast<double>(dev.static_bytes);
  for (const StageSpec& g : p.stages)
    total += static_cast<double>(p.num_microbatches) *
             static_cast<double>(g.act_f_bytes + g.ws_f_bytes + g.ws_b_bytes + g.ws_w_bytes);
  if (total > 0x1p62)
    return Status::Invalid("problem too large: its bytes (static + activations × microbatches) exceed 2^62");
  const HostLinkSpec& h = p.host_link;
  if (!std::isfinite(h.d2h_gb_per_s) || h.d2h_gb_per_s <= 0 || h.d2h_gb_per_s > 1e6)
    return bad("host_link.d2h_gb_per_s", "must be in (0, 1e6]", num(h.d2h_gb_per_s));
  if (!std::isfinite(h.h2d_gb_per_s) || h.h2d_gb_per_s <= 0 || h.h2d_gb_per_s > 1e6)
    return bad("host_link.h2d_gb_per_s", "must be in (0, 1e6]", num(h.h2d_gb_per_s));
  if (!(st = check_time("host_link.latency_us", h.latency_us)).ok()) return st;
  // Derived durations must be as bounded as given ones: a tiny bandwidth makes a transfer last
  // forever.
  for (int s = 0; s < S; s++) {
    const double off = p.offload_us(s), rel = p.reload_us(s);
    if (!(std::isfinite(off) && off <= kMaxTimeUs))
      return bad("host_link.d2h_gb_per_s",
                 "too slow: offloading stages[" + std::to_string(s) + "]'s " + std::to_string(p.stages[s].act_f_bytes) +
                     " bytes would take more than 1e12 µs",
                 num(h.d2h_gb_per_s));
    if (!(std::isfinite(rel) && rel <= kMaxTimeUs))
      return bad("host_link.h2d_gb_per_s",
                 "too slow: reloading stages[" + std::to_string(s) + "]'s " + std::to_string(p.stages[s].act_f_bytes) +
                     " bytes would take more than 1e12 µs",
                 num(h.h2d_gb_per_s));
  }
  return Status::Ok();
}

Problem make_uniform_problem(const UniformSpec& u) {
  Problem p;
  p.num_devices = u.num_devices;
  p.num_microbatches = u.num_microbatches;
  p.placement = u.placement;
  p.chunks_per_device = u.chunks_per_device;
  p.t_comm_us = u.t_comm_us;
  StageSpec st;
  st.t_f_us = u.t_f_us;
  st.t_b_us = u.t_b_us;
  st.t_w_us = u.t_w_us;
  st.t_r_us = u.t_f_us;
  st.act_f_bytes = u.act_f_bytes;
  st.act_w_bytes = u.act_w_bytes;
  st.act_b_bytes = -u.act_f_bytes - u.act_w_bytes;
  st.act_input_bytes = u.act_input_bytes;
  p.stages.assign(std::max(0, u.num_devices * u.chunks_per_device), st);
  DeviceSpec dev;
  dev.static_bytes = u.static_bytes;
  dev.mem_budget_bytes = u.mem_budget_bytes;
  p.devices.assign(std::max(0, u.num_devices), dev);
  for (int d = 0; d < u.num_devices; d++) p.devices[d].host_link = d;
  return p;
}

// Four devices, eight microbatches, uniform 10 ms passes and no communication latency, so every
// family's closed form applies.
// Each stage-microbatch keeps 2 GiB of activations (512 MiB of it until W); the 52 GiB budget
// fits 1F1B's four in flight on device 0 (40 GiB static + 8 GiB) but not GPipe's eight.
Problem default_problem() {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  u.t_f_us = u.t_b_us = u.t_w_us = 10000;
  u.act_f_bytes = 4ll << 29;
  u.act_w_bytes = -(1ll << 29);
  u.act_input_bytes = 32ll << 20;
  u.static_bytes = 40ll << 30;
  u.mem_budget_bytes = 52ll << 30;
  Problem p = make_uniform_problem(u);
  p.host_link = {/*d2h_gb_per_s=*/50, /*h2d_gb_per_s=*/50, /*latency_us=*/10};  // PCIe 5.0 x16
  return p;
}

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
    return Result<Problem>::Error(Status::Invalid(
        std::string("cannot re-cut for placement ") + placement_name(placement) + " with " +
        std::to_string(chunks_per_device) + " chunk(s) per device (linear: 1, vshape: 2, interleaved: 1 to 64)"));
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

Status check_no_recompute_layers(const Problem& p) {
  for (size_t s = 0; s < p.stages.size(); s++)
    if (p.stages[s].recompute_layers > 0)
      return Status::Invalid("stages[" + std::to_string(s) + "].recompute_layers is " +
                             std::to_string(p.stages[s].recompute_layers) +
                             ": this takes the model as profiled, without a recompute configuration");
  return Status::Ok();
}

Result<Problem> with_recompute_layers(const Problem& p, const std::vector<int>& layers, bool weights_in_b) {
  using R = Result<Problem>;
  if (Status st = check_no_recompute_layers(p); !st.ok()) return R::Error(st);
  if (layers.size() != p.stages.size())
    return R::Error(Status::Invalid("recompute layers: " + std::to_string(layers.size()) + " counts for " +
                                    std::to_string(p.stages.size()) + " stages"));
  Problem q = p;
  for (size_t s = 0; s < q.stages.size(); s++) {
    StageSpec& g = q.stages[s];
    const int k = layers[s], n = g.num_layers;
    if (k < 0 || k > n)
      return R::Error(Status::Invalid("recompute layers of stage " + std::to_string(s) + ": " + std::to_string(k) +
                                      " is not in 0.." + std::to_string(n)));
    if (k == 0) continue;
    const double share = static_cast<double>(k) / n;
    const int64_t layer_bytes = g.act_f_bytes / n;
    const int64_t dropped = static_cast<int64_t>(std::llround(share * g.act_f_bytes));
    g.act_f_bytes = std::min(g.act_f_bytes, g.act_f_bytes - dropped + k * g.act_input_bytes);
    if (weights_in_b) {
      g.act_w_bytes -= static_cast<int64_t>(std::llround(share * g.act_w_bytes));
      g.t_b_us += share * g.t_w_us;
      g.t_w_us -= share * g.t_w_us;
    }
    g.act_b_bytes = -g.act_f_bytes - g.act_w_bytes;
    g.t_b_us += share * g.t_r_us;
    g.ws_b_bytes += layer_bytes;
    g.recompute_layers = k;
  }
  Status st = check_problem(q);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(q));
}

}  // namespace optpipe
