#include "optimize/list_scheduler.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

namespace optpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Greedy {
  const Problem& p;
  const ListRules& rules;
  int S, M, D;
  std::vector<double> f_end, b_end;       // by stage·M + mb; +inf until placed (b_end: B or BW)
  std::vector<int> next_f, next_b;        // per stage: next microbatch to run
  std::vector<std::vector<int>> stages;   // per device, later stages first when later_stage_first
  std::vector<std::deque<Op>> pending_w;  // per device
  std::vector<int> live;
  std::vector<double> act_bytes;  // per device: activation bytes held (by the ops run so far)
  // Per device: slots held for the later chunks of microbatches whose first chunk has run there
  // (they cannot free memory before those run), with reserve_later_chunks.
  std::vector<int> reserved;
  std::vector<double> reserved_bytes;  // the same in bytes: the later chunks' act_f_bytes
  std::vector<int> first_stage;        // per device: its lowest stage
  std::vector<double> free_at, last_end, stalled_at;
  Schedule out;

  Greedy(const Problem& p_, const ListRules& r)
      : p(p_), rules(r), S(p_.num_stages()), M(p_.num_microbatches), D(p_.num_devices) {}

  double hop(int from, int to) const { return p.device_of(from) == p.device_of(to) ? 0 : p.t_comm_us; }

  double f_ready(int s, int i) const { return s == 0 ? 0 : f_end[(s - 1) * M + i] + hop(s - 1, s); }

  double b_ready(int s, int i) const {
    double r = f_end[s * M + i];
    if (s + 1 < S) r = std::max(r, b_end[(s + 1) * M + i] + hop(s + 1, s));
    return r;
  }

  int limit(int d) const { return rules.max_live.empty() ? std::numeric_limits<int>::max() : rules.max_live[d]; }

  bool done(int d) const {
    for (int s : stages[d])
      if (next_f[s] < M || next_b[s] < M) return false;
    return pending_w[d].empty();
  }

  void run_op(int d, const Op& op, double t) {
    const double end = t + op_duration_us(p, op);
    const int k = op.stage * M + op.microbatch;
    const StageSpec& st = p.stages[op.stage];
    switch (op.kind) {
      case OpKind::kF:
        f_end[k] = end;
        next_f[op.stage]++;
        live[d]++;
        act_bytes[d] += static_cast<double>(st.act_f_bytes);
        if (rules.reserve_later_chunks) {
          reserved[d] += op.stage == first_stage[d] ? static_cast<int>(stages[d].size()) - 1 : -1;
          reserved_bytes[d] += op.stage == first_stage[d] ? later_chunk_bytes(d) : -static_cast<double>(st.act_f_bytes);
        }
        break;
      case OpKind::kB:
        b_end[k] = end;
        next_b[op.stage]++;
        act_bytes[d] += static_cast<double>(st.act_b_bytes);
        if (rules.w_fills_only) pending_w[d].push_back(W(op.stage, op.microbatch));
        break;
      case OpKind::kBW:
        b_end[k] = end;
        next_b[op.stage]++;
        live[d]--;
        act_bytes[d] += static_cast<double>(st.act_b_bytes + st.act_w_bytes);
        break;
      case OpKind::kW:
        live[d]--;
        act_bytes[d] += static_cast<double>(st.act_w_bytes);
        if (!pending_w[d].empty() && pending_w[d].front() == op) pending_w[d].pop_front();
        break;
      default: break;
    }
    out.devices[d].compute.push_back(op);
    free_at[d] = end;
    last_end[d] = end;
    // Devices that found nothing to do look again when this op ends.
    for (int e = 0; e < D; e++)
      if (free_at[e] == kInf && !done(e)) free_at[e] = std::max(end, stalled_at[e]);
    if (op.kind == OpKind::kB && !rules.w_fills_only) run_op(d, W(op.stage, op.microbatch), end);
  }

  static Op W(int s, int i) { return Op{OpKind::kW, s, i}; }

  // Whether the limits let device d run a forward of stage s: with reservations, a first chunk
  // takes a slot (and the bytes) for each of the device's chunks, and a later chunk uses one
  // taken for it.
  bool admits(int d, int s) const {
    const double f_bytes = static_cast<double>(p.stages[s].act_f_bytes);
    if (!rules.reserve_later_chunks)
      return live[d] < limit(d) && (rules.max_act_bytes.empty() || act_bytes[d] + f_bytes <= rules.max_act_bytes[d]);
    if (s != first_stage[d]) return true;
    return live[d] + reserved[d] + static_cast<int>(stages[d].size()) <= limit(d) &&
           (rules.max_act_bytes.empty() ||
            act_bytes[d] + reserved_bytes[d] + f_bytes + later_chunk_bytes(d) <= rules.max_act_bytes[d]);
  }

  // The act_f_bytes of device d's chunks after its first: what a first chunk reserves.
  double later_chunk_bytes(int d) const {
    double sum = 0;
    for (int s : stages[d])
      if (s != first_stage[d]) sum += static_cast<double>(p.stages[s].act_f_bytes);
    return sum;
  }

  // Picks the op device d runs at time t, or returns false and the next time worth looking.
  bool pick(int d, double t, bool ignore_limit, Op* op, double* next_t) const {
    *next_t = kInf;
    auto consider = [&](double ready) {
      if (ready == kInf) return false;  // an input is not even scheduled yet
      if (ready > t) *next_t = std::min(*next_t, ready);
      return ready <= t;
    };
    const OpKind backward = rules.split_backward ? OpKind::kB : OpKind::kBW;
    bool found_b = false, found_f = false;
    Op b_op, f_op;
    for (int s : stages[d]) {
      const int ib = next_b[s];
      if (!found_b && ib < M && ib < next_f[s] && consider(b_ready(s, ib))) {
        b_op = Op{backward, s, ib};
        found_b = true;
      }
      const int jf = next_f[s];
      if (!found_f && jf < M && consider(f_ready(s, jf)) && (ignore_limit || admits(d, s))) {
        f_op = Op{OpKind::kF, s, jf};
        found_f = true;
      }
    }
    if (found_b && (rules.backward_first || !found_f)) {
      *op = b_op;
      return true;
    }
    if (found_f) {
      *op = f_op;
      return true;
    }
    if (!pending_w[d].empty()) {
      *op = pending_w[d].front();
      return true;
    }
    for (int e = 0; e < D; e++)
      if (last_end[e] > t) *next_t = std::min(*next_t, last_end[e]);
    return false;
  }

  Result<Schedule> run() {
    out.placement = p.placement;
    out.chunks_per_device = p.chunks_per_device;
    out.devices.resize(D);
    f_end.assign(static_cast<size_t>(S) * M, kInf);
    b_end.assign(static_cast<size_t>(S) * M, kInf);
    next_f.assign(S, 0);
    next_b.assign(S, 0);
    stages.assign(D, {});
    for (int s = 0; s < S; s++) stages[p.device_of(s)].push_back(s);
    if (rules.later_stage_first)
      for (auto& list : stages) std::reverse(list.begin(), list.end());
    pending_w.assign(D, {});
    live.assign(D, 0);
    reserved.assign(D, 0);
    reserved_bytes.assign(D, 0);
    act_bytes.assign(D, 0);
    first_stage.assign(D, S);
    for (int s = 0; s < S; s++) first_stage[p.device_of(s)] = std::min(first_stage[p.device_of(s)], s);
    free_at.assign(D, 0);
    last_end.assign(D, 0);
    stalled_at.assign(D, 0);

    for (;;) {
      int d = -1;
      for (int e = 0; e < D; e++)
        if (!done(e) && (d < 0 || free_at[e] < free_at[d])) d = e;
      if (d < 0) break;  // every device done
      if (free_at[d] == kInf) {
        // Every device waits and nothing is running: the limits block everything. Let the device
        // that stalled first run its earliest forward regardless.
        int best = -1;
        Op op;
        double best_t = kInf;
        for (int e = 0; e < D; e++) {
          Op cand;
          double next;
          if (done(e) || !pick(e, kInf, true, &cand, &next)) continue;
          const double t = std::max(stalled_at[e], cand.kind == OpKind::kF ? f_ready(cand.stage, cand.microbatch)
                                                                           : b_ready(cand.stage, cand.microbatch));
          if (t < best_t) {
            best = e;
            best_t = t;
            op = cand;
          }
        }
        OPTPIPE_CHECK(best >= 0, "list scheduler: no device can make progress");
        run_op(best, op, best_t);
        continue;
      }
      const double t = free_at[d];
      Op op;
      double next_t;
      if (pick(d, t, false, &op, &next_t)) {
        run_op(d, op, t);
      } else {
        stalled_at[d] = t;
        free_at[d] = next_t;
      }
    }
    return Result<Schedule>::Of(std::move(out));
  }
};

}  // namespace

Result<Schedule> list_schedule(const Problem& p, const ListRules& rules) {
  if (!rules.max_live.empty() && static_cast<int>(rules.max_live.size()) != p.num_devices)
    return Result<Schedule>::Error(Status::Invalid("list scheduler: one activation limit per device expected"));
  if (!rules.max_act_bytes.empty() && static_cast<int>(rules.max_act_bytes.size()) != p.num_devices)
    return Result<Schedule>::Error(Status::Invalid("list scheduler: one byte limit per device expected"));
  Greedy g(p, rules);
  return g.run();
}

}  // namespace optpipe
