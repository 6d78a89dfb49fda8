// Lower bounds that hold for every schedule of a problem that fits its budget, whatever its
// order, offloads and recomputes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "optpipe/optimize.h"

namespace optpipe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Idle time device d cannot avoid before its first backward. No B (so no W) can start on d
// before τ = the earliest any of its stages' first forward can end plus that stage's round trip.
// Until then d can only run forwards (and recomputes, which only add work), and each forward
// begun before τ still holds memory at τ: its whole activation if kept, its input if it is to be
// recomputed (and that R, costing t_R, comes after τ), nothing only if its offload — one at a
// time on d's link — has finished. So the forward time that can fill [first, τ] is at most:
// offloaded forwards (the longest ones), then kept ones by forward time per byte (fractional),
// then recomputed ones, each worth t_F − t_R at best.
double warmup_idle_us(const Problem& p, int d, const std::vector<double>& head, const std::vector<double>& round_trip,
                      double first_us) {
  const int S = p.num_stages();
  double tau = kInf;
  for (int s = 0; s < S; s++)
    if (p.device_of(s) == d) tau = std::min(tau, head[s] + p.stages[s].t_f_us + round_trip[s]);
  const double window = tau - first_us;
  if (!(window > 0) || window == kInf) return 0;

  struct Item {
    double t_f_us, act_bytes, count;
  };
  std::vector<Item> items;
  double t_f_min = kInf, t_offload_min = kInf, recompute_worth = 0;  // per µs of forward filled
  for (int s = 0; s < S; s++) {
    const StageSpec& st = p.stages[s];
    if (p.device_of(s) != d || head[s] >= tau || st.t_f_us <= 0) continue;
    // Forwards of one stage run one after another from its earliest start.
    const double count = std::min<double>(p.num_microbatches, std::ceil((tau - head[s]) / st.t_f_us));
    items.push_back({st.t_f_us, static_cast<double>(st.act_f_bytes), count});
    t_f_min = std::min(t_f_min, st.t_f_us);
    t_offload_min = std::min(t_offload_min, p.offload_us(s));
    recompute_worth = std::max(recompute_worth, 1 - st.t_r_us / st.t_f_us);
  }
  if (items.empty()) return window;

  double filled = 0;
  // Offloads: the longest forwards, as many as the link can finish by τ.
  double offloads = t_offload_min > 0 ? std::floor(std::max(0.0, window - t_f_min) / t_offload_min) : kInf;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.t_f_us > b.t_f_us; });
  for (Item& it : items) {
    const double n = std::min(offloads, it.count);
    filled += n * it.t_f_us;
    offloads -= n;
    it.count -= n;
  }
  // Kept: the most forward time per byte first, the last one fractional.
  double capacity = static_cast<double>(p.devices[d].mem_budget_bytes - p.devices[d].static_bytes);
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.t_f_us * b.act_bytes > b.t_f_us * a.act_bytes; });
  for (Item& it : items) {
    if (capacity <= 0) break;
    const double n = it.act_bytes > 0 ? std::min(it.count, capacity / it.act_bytes) : it.count;
    filled += n * it.t_f_us;
    capacity -= n * it.act_bytes;
    it.count -= n;
  }
  // Recomputed ones (their inputs taken as free): each µs of forward costs t_R/t_F µs later.
  const double idle = std::max(0.0, window - filled);
  return idle * (1 - recompute_worth);
}

}  // namespace

namespace {

// Earliest start of the first forward of each stage: the forwards of all earlier stages, and a
// hop for every change of device on the way.
std::vector<double> forward_heads(const Problem& p) {
  std::vector<double> head(p.num_stages(), 0);
  for (int s = 1; s < p.num_stages(); s++)
    head[s] = head[s - 1] + p.stages[s - 1].t_f_us + (p.device_of(s - 1) == p.device_of(s) ? 0 : p.t_comm_us);
  return head;
}

// Per device: the earliest its first op can start, and all its F, B and W time.
void device_heads_and_work(const Problem& p, const std::vector<double>& head, std::vector<double>* first,
                           std::vector<double>* work) {
  first->assign(p.num_devices, kInf);
  work->assign(p.num_devices, 0);
  for (int s = 0; s < p.num_stages(); s++) (*first)[p.device_of(s)] = std::min((*first)[p.device_of(s)], head[s]);
  for (int d = 0; d < p.num_devices; d++) (*work)[d] = p.work_us(d);
}

}  // namespace

double load_lower_bound(const Problem& p) {
  const int S = p.num_stages();
  const std::vector<double> head = forward_heads(p);
  std::vector<double> first, work;
  device_heads_and_work(p, head, &first, &work);
  double bound = 0;
  for (int d = 0; d < p.num_devices; d++) bound = std::max(bound, first[d] + work[d]);
  // One microbatch's own chain: every forward, every input-gradient back, then stage 0's W.
  double chain = head[S - 1];
  for (int s = 0; s < S; s++) chain += (s == S - 1 ? p.stages[s].t_f_us : 0) + p.stages[s].t_b_us;
  for (int s = S - 1; s > 0; s--) chain += p.device_of(s) == p.device_of(s - 1) ? 0 : p.t_comm_us;
  chain += p.stages[0].t_w_us;
  return std::max(bound, chain);
}

double makespan_lower_bound(const Problem& p) {
  const int S = p.num_stages(), D = p.num_devices, M = p.num_microbatches;
  const std::vector<double> head = forward_heads(p);
  std::vector<double> first, work;
  device_heads_and_work(p, head, &first, &work);
  double bound = load_lower_bound(p);

  // Memory-time area. Activation memory never exceeds C = budget − static, so over a makespan T
  // the activations' bytes × lifetimes sum to at most C·T. An activation kept from F's start to
  // B's end lives at least t_F + (the round trip through the later stages) + t_B. Offloading
  // shortens that by the round trip less both transfers, at channel time t_offload each;
  // recomputing keeps only the input in between, at device time t_R each. Whatever a schedule
  // chooses, its area, device time and channel time satisfy these; the smallest T for which
  // even the most favourable (fractional) choices satisfy them is a lower bound.
  std::vector<double> round_trip(S, 0);  // F(s) end → B(s) start, at least
  for (int s = S - 2; s >= 0; s--) {
    const double hop = p.device_of(s) == p.device_of(s + 1) ? 0 : p.t_comm_us;
    round_trip[s] = round_trip[s + 1] + 2 * hop + p.stages[s + 1].t_f_us + p.stages[s + 1].t_b_us;
  }
  for (int d = 0; d < D; d++)
    bound = std::max(bound, first[d] + work[d] + warmup_idle_us(p, d, head, round_trip, first[d]));

  for (int d = 0; d < D; d++) {
    const double capacity = static_cast<double>(p.devices[d].mem_budget_bytes - p.devices[d].static_bytes);
    if (capacity <= 0) continue;  // nothing fits: no bound needed
    struct Class {
      double save_offload, t_offload, save_recompute, t_recompute;
    };
    std::vector<Class> classes;
    double area = 0;  // every activation kept
    for (int s = 0; s < S; s++) {
      if (p.device_of(s) != d) continue;
      const StageSpec& st = p.stages[s];
      const double a_f = static_cast<double>(st.act_f_bytes), a_w = -static_cast<double>(st.act_w_bytes);
      area += M * (a_f * (st.t_f_us + round_trip[s] + st.t_b_us) + a_w * st.t_w_us);
      classes.push_back({a_f * std::max(0.0, round_trip[s] - p.offload_us(s) - p.reload_us(s)), p.offload_us(s),
                         (a_f - static_cast<double>(st.act_input_bytes)) * std::max(0.0, round_trip[s] - st.t_r_us),
                         st.t_r_us});
    }
    // The most area that choices fitting in `budget_us` of one resource can save (fractional).
    auto best_saving = [&](double budget_us, bool offload) {
      std::vector<std::pair<double, double>> items;  // (saving per µs, saving of all M)
      for (const Class& c : classes) {
        const double save = offload ? c.save_offload : c.save_recompute, t = offload ? c.t_offload : c.t_recompute;
        if (save <= 0) continue;
        if (t <= 0) return std::numeric_limits<double>::infinity();
        items.push_back({save / t, save * M});
      }
      std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      double saved = 0;
      for (const auto& [rate, all] : items) {
        const double take = std::min(all, rate * std::max(0.0, budget_us));
        saved += take;
        budget_us -= take / rate;
        if (budget_us <= 0) break;
      }
      return saved;
    };
    double most_per_activation = 0;
    for (const Class& c : classes) most_per_activation += M * std::max(c.save_offload, c.save_recompute);
    const double start = first[d] + work[d];
    auto fits_by = [&](double T) {
      const double saved = std::min(most_per_activation, best_saving(T, true) + best_saving(T - start, false));
      return area - saved <= capacity * T;
    };
    if (fits_by(start)) continue;
    double lo = start, hi = std::max(2 * start, area / capacity);
    while (!fits_by(hi)) hi *= 2;
    for (int k = 0; k < 60; k++) {
      const double mid = (lo + hi) / 2;
      (fits_by(mid) ? hi : lo) = mid;
    }
    bound = std::max(bound, lo);
  }
  return bound;
}

std::vector<int64_t> budget_lower_bound(const Problem& p) {
  std::vector<int64_t> out(p.num_devices);
  for (int d = 0; d < p.num_devices; d++) out[d] = p.devices[d].static_bytes;
  for (int s = 0; s < p.num_stages(); s++) {
    const StageSpec& st = p.stages[s];
    // While F runs it holds its whole activation and its workspace, whatever happens later.
    int64_t op = st.act_f_bytes + st.ws_f_bytes;
    const int d = p.device_of(s);
    out[d] = std::max(out[d], p.devices[d].static_bytes + op);
  }
  return out;
}

double lower_bound_for(const Problem& p, bool fits_budget, Objective objective) {
  if (objective == Objective::kSpan) return span_lower_bound(p);
  return fits_budget ? makespan_lower_bound(p) : load_lower_bound(p);
}

double span_lower_bound(const Problem& p) {
  double bound = 0;
  for (int d = 0; d < p.num_devices; d++) bound = std::max(bound, p.work_us(d));
  return bound;
}

}  // namespace optpipe
