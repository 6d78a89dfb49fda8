// Lower bounds that hold for every schedule of a problem that fits its budget, whatever its
// order, offloads and recomputes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "optimize/device_demand.h"
#include "optpipe/optimize.h"

namespace optpipe {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Earliest start of the first forward of each stage: the forwards of all earlier stages, and a
// hop for every change of device on the way.
std::vector<double> forward_heads(const Problem& p) {
  std::vector<double> head(p.num_stages(), 0);
  for (int s = 1; s < p.num_stages(); s++)
    head[s] = head[s - 1] + p.stages[s - 1].t_f_us + (p.device_of(s - 1) == p.device_of(s) ? 0 : p.t_comm_us);
  return head;
}

// Per stage: F(s) end → B(s) start, at least.
std::vector<double> round_trips(const Problem& p) {
  const int S = p.num_stages();
  std::vector<double> round_trip(S, 0);
  for (int s = S - 2; s >= 0; s--) {
    const double hop = p.device_of(s) == p.device_of(s + 1) ? 0 : p.t_comm_us;
    round_trip[s] = round_trip[s + 1] + 2 * hop + p.stages[s + 1].t_f_us + p.stages[s + 1].t_b_us;
  }
  return round_trip;
}

// Per stage s > 0: B(s) end → the microbatch's end at least: the B's of stages s−1..0, a hop for
// every change of device on the way, then W on stage 0. 0 for stage 0.
std::vector<double> tails(const Problem& p) {
  std::vector<double> tail(p.num_stages(), 0);
  for (int s = 1; s < p.num_stages(); s++)
    tail[s] = (s == 1 ? p.stages[0].t_w_us : tail[s - 1]) + p.stages[s - 1].t_b_us +
              (p.device_of(s - 1) == p.device_of(s) ? 0 : p.t_comm_us);
  return tail;
}

std::vector<DeviceDemand> device_demands(const Problem& p, const ScheduleRules& rules = {}) {
  const std::vector<double> head = forward_heads(p), round_trip = round_trips(p), tail = tails(p);
  std::vector<DeviceDemand> out(p.num_devices);
  for (int s = p.num_stages() - 1; s >= 0; s--) out[p.device_of(s)].tail_us = tail[s];  // its first stage's
  for (int d = 0; d < p.num_devices; d++) {
    out[d].first_us = kInf;
    out[d].work_us = p.work_us(d);
    out[d].capacity_bytes = static_cast<double>(p.devices[d].mem_budget_bytes - p.devices[d].static_bytes);
    out[d].num_microbatches = p.num_microbatches;
    out[d].offload = rules.offload;
    out[d].recompute = rules.recompute;
  }
  double slowest_f_us = 0;  // of the stages so far
  for (int s = 0; s < p.num_stages(); s++) {
    DeviceDemand& dd = out[p.device_of(s)];
    dd.first_us = std::min(dd.first_us, head[s]);
    slowest_f_us = std::max(slowest_f_us, p.stages[s].t_f_us);
    dd.stages.push_back({p.stages[s], head[s], round_trip[s], p.offload_us(s), p.reload_us(s),
                         s == 0 ? p.stages[0].t_w_us : tail[s], slowest_f_us});
  }
  return out;
}

// Per unit: time and bytes; units: how many. The time of the units that fit `capacity_bytes`
// (taken as 0 when below), the most time per byte first, the last one fractional; a unit of no
// bytes always fits. The units taken leave `items`, the bytes they hold leave the capacity.
struct PackItem {
  double time_us, bytes, count;
};

double pack_by_time_per_byte(std::vector<PackItem>& items, double* capacity_bytes) {
  std::sort(items.begin(), items.end(),
            [](const PackItem& a, const PackItem& b) { return a.time_us * b.bytes > b.time_us * a.bytes; });
  double capacity = std::max(0.0, *capacity_bytes), packed_us = 0;
  for (PackItem& it : items) {
    const double n = it.bytes > 0 ? std::min(it.count, capacity / it.bytes) : it.count;
    packed_us += n * it.time_us;
    capacity = std::max(0.0, capacity - n * std::max(0.0, it.bytes));
    it.count -= n;
  }
  *capacity_bytes = capacity;
  return packed_us;
}

// The forward time of one stage that can have run by t: its m-th forward starts no sooner than
// head + m·interval and runs t_F.
double forwards_done_by_us(const StageLoad& sl, double num_microbatches, double t) {
  const double x = t - sl.head_us, t_f = sl.spec.t_f_us, r = std::max(sl.f_interval_us, t_f);
  if (!(x > 0) || !(t_f > 0)) return 0;
  const double whole = std::min(num_microbatches, x >= t_f ? std::floor((x - t_f) / r) + 1 : 0);
  const double partial = std::max(0.0, std::min(num_microbatches, std::ceil(x / r)) - whole);
  // The partial ones, m = whole .. whole + partial − 1, each x − m·r.
  return whole * t_f + partial * x - r * partial * (2 * whole + partial - 1) / 2;
}

// One stage's forwards by t, as the memory bound below sees them.
struct ForwardClass {
  double t_f_us, bytes;
  double count;            // begun before t (the m-th no sooner than head + m·interval)
  double arrived_us;       // forward time that can have run by t (forwards_done_by_us)
  double own_offloads;     // its own offloads that can end by t, one at a time from its first's end
  double recompute_worth;  // per µs of its forwards recomputed: 1 − t_R/t_F (0 without recomputes)
};

// The forward time kept or offloaded forwards of the classes can have run by t, at most: each
// forward begun by then holds its whole activation at t (while it runs too) unless its offload
// has ended — at most `offloads` of them — or it is to be recomputed; the kept ones' bytes fit
// the capacity. The linear relaxation's dual, λ per offload and μ per byte, at the candidate
// prices (any prices bound it; these give the relaxation's optimum when the classes' bytes are
// equal).
double kept_or_offloaded_us(const std::vector<ForwardClass>& classes, double offloads, double capacity_bytes) {
  thread_local std::vector<double> lambdas, mus;  // kept, as in warmup_idle_us
  lambdas.assign(1, 0);
  mus.assign(1, 0);
  double best = 0;
  for (const ForwardClass& c : classes) {
    best += c.count * c.t_f_us;
    lambdas.push_back(c.t_f_us);
    if (c.bytes > 0) mus.push_back(c.t_f_us / c.bytes);
  }
  for (double lambda : lambdas)
    for (double mu : mus) {
      if (lambda > 0 && offloads == kInf) continue;
      double ub = (lambda > 0 ? lambda * offloads : 0) + mu * capacity_bytes;
      for (const ForwardClass& c : classes) {
        const double keep_price = c.bytes > 0 ? mu * c.bytes : 0;
        const double price = c.own_offloads > 0 ? std::min(lambda, keep_price) : keep_price;
        ub += c.count * std::max(0.0, c.t_f_us - price);
      }
      best = std::min(best, ub);
    }
  return best;
}

// What the forwards the device can have run by t are worth, at most, toward its idle time:
// a kept or offloaded one its t_F, a recomputed one t_F − t_R (its R comes later). Bounded two
// ways, the least taken: every class together (kept_or_offloaded_us, the recomputed rest at the
// best worth), and each class alone with whole activations, the others' forwards counted in full
// (which is how a device with those stages unpriced is priced, so pricing more stages never
// lowers the bound).
double forward_worth_us(const std::vector<ForwardClass>& classes, double offloads, double capacity_bytes) {
  double arrived = 0, best_worth = 0;
  for (const ForwardClass& c : classes) {
    arrived += c.arrived_us;
    best_worth = std::max(best_worth, c.recompute_worth);
  }
  const double together = std::min(arrived, kept_or_offloaded_us(classes, offloads, capacity_bytes));
  double worth = together + best_worth * (arrived - together);
  for (const ForwardClass& c : classes) {
    const double offloaded = std::min({c.count, offloads, c.own_offloads});
    const double kept =
        c.bytes > 0 ? std::min(c.count - offloaded, std::floor(capacity_bytes / c.bytes)) : c.count - offloaded;
    const double full = std::min(c.arrived_us, (offloaded + std::max(0.0, kept)) * c.t_f_us);
    worth = std::min(worth, arrived - c.arrived_us + full + c.recompute_worth * (c.arrived_us - full));
  }
  return worth;
}

}  // namespace

// No B (so no W) can start on the device before τ = the earliest any of its stages' first
// forward can end plus that stage's round trip. Until then it can only run forwards (and
// recomputes, which only add work). At any t ≤ τ the device has been idle for at least t − first
// less what the forwards it can have run by t are worth:
// - they arrive no faster than the slowest stage up to theirs runs its own (forwards_done_by_us);
// - each begun by t still holds memory at t — its whole activation if kept, its input if it is to
//   be recomputed (and that R, costing t_R, comes after τ), nothing only if its offload (one at a
//   time on the device's link, from the first forward's end) has finished (forward_worth_us).
// The largest over t at each stage's head (just before its forwards can help) and at τ.
//
// Any τ' ≤ τ serves as well (the same holds at τ'), so an unpriced stage's least τ may stand in;
// its forwards count as filling all of [its head, τ'] at no memory.
double warmup_idle_us(const DeviceDemand& dd) {
  double tau = kInf;
  for (const StageLoad& sl : dd.stages) tau = std::min(tau, sl.head_us + sl.spec.t_f_us + sl.round_trip_us);
  for (const DeviceDemand::Unpriced& u : dd.unpriced) tau = std::min(tau, u.tau_us);
  if (!(tau > dd.first_us) || tau == kInf) return 0;

  thread_local std::vector<ForwardClass> classes;  // kept: the bounds over every partition call this millions of times
  double idle = 0;
  auto idle_by = [&](double t) {
    if (!(t > dd.first_us) || t > tau) return;
    double free_fill = 0;  // the unpriced stages'
    for (const DeviceDemand::Unpriced& u : dd.unpriced)
      free_fill += std::max(0.0, t - std::max(u.head_us, dd.first_us));
    double link_from = kInf, t_offload_min = kInf;
    classes.clear();
    for (const StageLoad& sl : dd.stages) {
      const StageSpec& st = sl.spec;
      if (!(t > sl.head_us) || st.t_f_us <= 0) continue;
      const double interval = std::max(sl.f_interval_us, st.t_f_us);
      const double link_time = t - sl.head_us - st.t_f_us;  // after its first forward
      const double own_offloads = !dd.offload || !(link_time >= sl.offload_us) ? 0
                                  : sl.offload_us > 0                          ? std::floor(link_time / sl.offload_us)
                                                                               : kInf;
      classes.push_back({st.t_f_us, static_cast<double>(st.act_f_bytes),
                         std::min<double>(dd.num_microbatches, std::ceil((t - sl.head_us) / interval)),
                         forwards_done_by_us(sl, dd.num_microbatches, t), own_offloads,
                         dd.recompute ? std::max(0.0, 1 - st.t_r_us / st.t_f_us) : 0});
      link_from = std::min(link_from, sl.head_us + st.t_f_us);
      if (own_offloads > 0) t_offload_min = std::min(t_offload_min, sl.offload_us);
    }
    const double offloads = t_offload_min == kInf ? 0
                            : t_offload_min > 0   ? std::floor(std::max(0.0, t - link_from) / t_offload_min)
                                                  : kInf;
    // A capacity below 0 fits no schedule: taken as 0, as the bound over every partition, which
    // may price the device with more room, does.
    const double worth = classes.empty() ? 0 : forward_worth_us(classes, offloads, std::max(0.0, dd.capacity_bytes));
    idle = std::max(idle, t - dd.first_us - free_fill - worth);
  };
  for (const StageLoad& sl : dd.stages) idle_by(sl.head_us);
  for (const DeviceDemand::Unpriced& u : dd.unpriced) idle_by(u.head_us);
  idle_by(tau);
  return idle;
}

// Let e be the end of the device's last B; the microbatch's chain after it ends no sooner than
// e + tail_us. Only W's can follow e on the device (a later F, R or B would need a B after it),
// and each of them was pending at e, holding its −act_w bytes, which together fit the capacity;
// so the W time after e is at most a fractional knapsack of the capacity by W time per byte,
// each stage's W's M at most. The work before e then ends no sooner than first + (warm-up
// idle) + work − (W time after e), and the makespan is at least e + max(tail, W time after e):
// first + work + warm-up idle + max(0, tail − W time after e).
double cooldown_idle_us(const DeviceDemand& dd) {
  if (!(dd.tail_us > 0)) return 0;
  if (!dd.unpriced.empty() && dd.unpriced_w_us_per_byte == kInf) return 0;
  thread_local std::vector<PackItem> items;  // kept, as in warmup_idle_us
  items.clear();
  for (const StageLoad& sl : dd.stages)
    if (sl.spec.t_w_us > 0)
      items.push_back(
          {sl.spec.t_w_us, -static_cast<double>(sl.spec.act_w_bytes), static_cast<double>(dd.num_microbatches)});
  double capacity = dd.capacity_bytes;
  double deferred_us = pack_by_time_per_byte(items, &capacity);
  if (!dd.unpriced.empty()) deferred_us += capacity * dd.unpriced_w_us_per_byte;
  return std::max(0.0, dd.tail_us - deferred_us);
}

namespace {

// One microbatch's own chain: every forward, every input-gradient back, then stage 0's W.
double chain_us(const Problem& p) {
  const int S = p.num_stages();
  double chain = forward_heads(p)[S - 1];
  for (int s = 0; s < S; s++) chain += (s == S - 1 ? p.stages[s].t_f_us : 0) + p.stages[s].t_b_us;
  for (int s = S - 1; s > 0; s--) chain += p.device_of(s) == p.device_of(s - 1) ? 0 : p.t_comm_us;
  return chain + p.stages[0].t_w_us;
}

}  // namespace

double load_lower_bound(const Problem& p) {
  double bound = chain_us(p);
  for (const DeviceDemand& dd : device_demands(p)) bound = std::max(bound, dd.first_us + dd.work_us);
  return bound;
}

namespace {

// Items: (area saved per µs of one resource, area saved by all M). The most area that choices
// fitting in `budget_us` of that resource can save (fractional); a rate of ∞ costs none of it.
double best_saving(std::vector<std::pair<double, double>>& items, double budget_us) {
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double saved = 0;
  for (const auto& [rate, all] : items) {
    if (rate == kInf) {
      saved += all;
      continue;
    }
    if (budget_us <= 0) break;
    const double take = std::min(all, rate * budget_us);
    saved += take;
    budget_us -= take / rate;
  }
  return saved;
}

// The most held time (× bytes where `weigh_bytes`, else per activation) that offloads and
// recomputes can save by a makespan T, the most favourable (fractional) choices within the
// channel's time for offloads and the device's spare time for recomputes. An offload shortens a
// kept activation's life by the round trip less both transfers, at channel time t_offload; a
// recompute by the round trip less t_R (keeping only the input between), at device time t_R.
double choices_saving(const DeviceDemand& dd, double T, bool weigh_bytes) {
  const double M = dd.num_microbatches;
  // (saving per µs, saving of all M), for offloads and recomputes; few stages share a device
  thread_local std::vector<std::pair<double, double>> offloads, recomputes;  // kept, as in warmup_idle_us
  offloads.clear();
  recomputes.clear();
  double most_saved = 0;
  for (const StageLoad& sl : dd.stages) {
    const StageSpec& st = sl.spec;
    const double a_f = weigh_bytes ? static_cast<double>(st.act_f_bytes) : 1;
    const double a_dropped = weigh_bytes ? a_f - static_cast<double>(st.act_input_bytes) : 1;
    const double save_offload = dd.offload ? a_f * std::max(0.0, sl.round_trip_us - sl.offload_us - sl.reload_us) : 0;
    const double save_recompute = dd.recompute ? a_dropped * std::max(0.0, sl.round_trip_us - st.t_r_us) : 0;
    most_saved += M * std::max(save_offload, save_recompute);
    if (save_offload > 0)
      offloads.push_back({sl.offload_us > 0 ? save_offload / sl.offload_us : kInf, M * save_offload});
    if (save_recompute > 0)
      recomputes.push_back({st.t_r_us > 0 ? save_recompute / st.t_r_us : kInf, M * save_recompute});
  }
  return std::min(most_saved, best_saving(offloads, T) + best_saving(recomputes, T - dd.first_us - dd.work_us));
}

// Memory-time area. Activation memory never exceeds C = budget − static, so over a makespan T
// the activations' bytes × lifetimes sum to at most C·T. An activation kept from F's start to
// B's end lives at least t_F + (the round trip through the later stages) + t_B, less what
// offloads and recomputes save. The smallest T for which even the most favourable choices
// satisfy this is a lower bound.
bool bytes_fit_by(const DeviceDemand& dd, double T) {
  double area = 0;
  for (const StageLoad& sl : dd.stages) {
    const StageSpec& st = sl.spec;
    area += dd.num_microbatches * (static_cast<double>(st.act_f_bytes) * (st.t_f_us + sl.round_trip_us + st.t_b_us) -
                                   static_cast<double>(st.act_w_bytes) * st.t_w_us);
  }
  // The saving is never negative: without it fitting is settled before pricing the choices.
  return area <= dd.capacity_bytes * T || area - choices_saving(dd, T, true) <= dd.capacity_bytes * T;
}

// Whole activations: what the area misses when the capacity is not a whole number of them (a
// budget of 1.5 activations holds one at a time). From F's start to its B's end an activation
// holds its act_f bytes whole, except between its offload's end and its reload's start or
// between F's end and its recompute's start, and nothing else on the device holds negative
// memory; so at any time at most k are held whole, k the most of the device's smallest ones
// (M per stage) that fit C. Each is held within [the earliest head, T − the least after_b] of
// its device's stages, for at least t_F + round trip + t_B if kept, less what offloads (held
// t_F + t_offload + t_reload + t_B) and recomputes (t_F + t_R + t_B) save. The held times sum to
// at most k × that window.
bool whole_activations_fit_by(const DeviceDemand& dd, double T) {
  const double M = dd.num_microbatches;
  thread_local std::vector<double> sizes;  // kept, as in warmup_idle_us
  sizes.clear();
  double window_start = kInf, after_b = kInf, held = 0;
  for (const StageLoad& sl : dd.stages) {
    const StageSpec& st = sl.spec;
    if (st.act_f_bytes <= 0) return true;  // any number of them fit
    sizes.push_back(static_cast<double>(st.act_f_bytes));
    window_start = std::min(window_start, sl.head_us);
    after_b = std::min(after_b, sl.after_b_us);
    held += M * (st.t_f_us + sl.round_trip_us + st.t_b_us);
  }
  std::sort(sizes.begin(), sizes.end());
  double k = 0, left = dd.capacity_bytes;
  for (double a : sizes) {
    const double n = std::min(M, std::floor(left / a));
    k += n;
    left -= n * a;
    if (n < M) break;
  }
  // None fits: no schedule exists, which budget_lower_bound reports; all fit: nothing to add.
  if (k < 1 || k >= M * static_cast<double>(sizes.size())) return true;
  const double room = k * (T - window_start - after_b);
  return held <= room || held - choices_saving(dd, T, false) <= room;
}

}  // namespace

bool memory_fits_by(const DeviceDemand& dd, double T) {
  if (dd.capacity_bytes <= 0) return true;
  return bytes_fit_by(dd, T) && whole_activations_fit_by(dd, T);
}

double memory_bound_us(const DeviceDemand& dd) {
  double lo = dd.first_us + dd.work_us;
  if (memory_fits_by(dd, lo)) return lo;
  double hi = 2 * lo + 1;
  for (int k = 0; k < 64 && !memory_fits_by(dd, hi); k++) hi *= 2;
  for (int k = 0; k < 60; k++) {
    const double mid = (lo + hi) / 2;
    (memory_fits_by(dd, mid) ? hi : lo) = mid;
  }
  return lo;
}

double makespan_lower_bound(const Problem& p, const ScheduleRules& rules) {
  double bound = chain_us(p);  // and each device's first + work, which the warm-up term includes
  for (const DeviceDemand& dd : device_demands(p, rules)) {
    bound = std::max(bound, dd.first_us + dd.work_us + warmup_idle_us(dd) + cooldown_idle_us(dd));
    bound = std::max(bound, memory_bound_us(dd));
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

double lower_bound_for(const Problem& p, bool fits_budget, Objective objective, const ScheduleRules& rules) {
  if (objective == Objective::kSpan) return span_lower_bound(p);
  return fits_budget ? makespan_lower_bound(p, rules) : load_lower_bound(p);
}

double span_lower_bound(const Problem& p) {
  double bound = 0;
  for (int d = 0; d < p.num_devices; d++) bound = std::max(bound, p.work_us(d));
  return bound;
}

}  // namespace optpipe
