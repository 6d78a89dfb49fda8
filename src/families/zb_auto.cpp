// The zero-bubble repository's automatic scheduler, the one behind its ZB-1p and ZB-2p (Qi et al.,
// ICLR 2024; megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py, Graph.manual_order and
// initial_solution). A greedy pass over microbatches on a timeline of its own: as many warm-up
// forwards as the activation budget and the first backward's arrival allow, then one F and one B
// per round on every stage, each preceded by the W's the memory needs and the W's that fit into
// the wait for its input. Eight variants of its three switches; the one with the shortest span in
// optpipe's simulation is kept. Its memory budget is each device's budget less its static bytes.
#include <cmath>

#include "families/common.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

struct Switches {
  bool allow_bubble_before_first_b, prioritize_b, no_bubble_greedy;
};

// One run of manual_order: every op's completion time on the scheduler's own timeline, or an
// empty vector when some device's memory cannot hold what the order needs.
class ZbGreedy {
 public:
  ZbGreedy(const Problem& p, Switches sw) : p_(p), sw_(sw), S_(p.num_stages()), M_(p.num_microbatches) {
    f_.assign(S_, 0), b_.assign(S_, 0), w_.assign(S_, 0);
    m_.assign(S_, 0);
    e_.assign(S_, 0), bubble_.assign(S_, 0);
    t_.assign(3 * S_ * M_, 0);
    for (int j = 0; j < S_; j++) max_mem_.push_back(p.devices[j].mem_budget_bytes - p.devices[j].static_bytes);
  }

  // The ops' completion times by id(type, stage, mb); empty when memory cannot fit.
  std::vector<double> run() {
    const double comm = p_.t_comm_us;
    for (int i = 0; i < M_; i++) {
      if (i == 0 ? !first_round(comm) : !round(i, comm)) return {};
    }
    for (int j = 0; j < S_; j++)
      while (w_[j] < M_) put(j, 2);
    return t_;
  }

  int id(int type, int stage, int mb) const { return (type * S_ + stage) * M_ + mb; }

 private:
  double cost(int type, int stage) const {
    const StageSpec& g = p_.stages[stage];
    return type == 0 ? g.t_f_us : type == 1 ? g.t_b_us : g.t_w_us;
  }
  int64_t mem(int type, int stage) const {
    const StageSpec& g = p_.stages[stage];
    return type == 0 ? g.act_f_bytes : type == 1 ? g.act_b_bytes : g.act_w_bytes;
  }
  double max_bubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }

  void put(int j, int type) {
    int& count = type == 0 ? f_[j] : type == 1 ? b_[j] : w_[j];
    const int op = id(type, j, count);
    const double c = cost(type, j);
    double end = e_[j] + c;
    const double no_bubble = end;
    if (j > 0 && type == 0) end = std::max(end, t_[id(0, j - 1, count)] + p_.t_comm_us + c);
    if (j < S_ - 1 && type == 1) end = std::max(end, t_[id(1, j + 1, count)] + p_.t_comm_us + c);
    if (f_[j] > 0) bubble_[j] += end - no_bubble;
    e_[j] = end;
    t_[op] = end;
    m_[j] += mem(type, j);
    count++;
  }

  // W's until an op of `bytes` fits; false when none is left to free memory.
  bool make_room(int j, int64_t bytes) {
    while (m_[j] + bytes > max_mem_[j]) {
      if (w_[j] >= b_[j]) return false;
      put(j, 2);
    }
    return true;
  }

  // W's that end before the input arrives at `ready`, and one more if the wait is a bubble worse
  // than the worst so far (or always with no_bubble_greedy).
  void fill_wait(int j, double ready) {
    while (w_[j] < b_[j] && e_[j] + cost(2, j) <= ready) put(j, 2);
    if (w_[j] < b_[j] && e_[j] < ready) {
      if (ready - e_[j] <= max_bubble() - bubble_[j]) {
        if (sw_.no_bubble_greedy) put(j, 2);
      } else {
        put(j, 2);
      }
    }
  }

  bool first_round(double comm) {
    for (int j = 0; j < S_; j++) put(j, 0);
    std::vector<int> f_required(S_, 0);
    double last_t = 0;
    for (int j = S_ - 1; j >= 0; j--) {
      if (j == S_ - 1) {
        last_t = t_[id(0, j, 0)] + cost(1, j);
        continue;
      }
      int64_t mem_j = m_[j];
      double busy = e_[j];
      while (f_[j] + f_required[j] < M_ && mem_j + mem(0, j) <= max_mem_[j]) {
        if (sw_.allow_bubble_before_first_b ? busy + cost(0, j) > last_t + comm : busy >= last_t + comm) break;
        mem_j += mem(0, j);
        busy += cost(0, j);
        f_required[j]++;
      }
      last_t = std::max(busy, last_t + comm) + cost(1, j);
    }
    for (int j = 1; j < S_; j++)
      while (f_required[j] > 0 && f_required[j] >= f_required[j - 1] && f_[j] + f_required[j] < M_) f_required[j]--;
    for (int j = 0; j < S_; j++)
      for (int k = 0; k < f_required[j]; k++) put(j, 0);
    for (int j = S_ - 1; j >= 0; j--) put(j, 1);
    return true;
  }

  bool round(int i, double comm) {
    std::vector<int> f_required(S_, 0);
    for (int j = 0; j < S_; j++) {
      if (f_[j] >= M_) continue;
      if (j + 1 < S_ && f_[j] >= f_[j + 1] + 2 && sw_.prioritize_b) {
        const double next_plus_fw = e_[j + 1] + cost(0, j + 1) + cost(1, j + 1) + comm;
        if (e_[j] >= next_plus_fw) continue;
        double w_cost = 0;
        int64_t mem_with_w = m_[j] + mem(0, j);
        for (int w_cnt = 0; mem_with_w > max_mem_[j] && w_[j] + w_cnt < b_[j]; w_cnt++) {
          w_cost += cost(2, j);
          mem_with_w += mem(2, j);
        }
        if (e_[j] + cost(0, j) + w_cost <= next_plus_fw) {
          f_required[j] = 1;
          continue;
        }
        if (next_plus_fw - e_[j] <= max_bubble() - bubble_[j]) continue;
      }
      f_required[j] = 1;
    }
    for (int j = S_ - 2; j >= 0; j--) f_required[j] = std::min(f_required[j], f_required[j + 1]);
    for (int j = 0; j < S_; j++) {
      if (f_required[j] == 0) continue;
      if (!make_room(j, mem(0, j))) return false;
      if (j > 0) fill_wait(j, t_[id(0, j - 1, f_[j])] + comm);
      put(j, 0);
    }
    for (int j = S_ - 1; j >= 0; j--) {
      if (b_[j] != i) return false;  // a stage fell behind the scheduler's own bookkeeping
      if (!make_room(j, mem(1, j))) return false;
      if (j + 1 < S_) fill_wait(j, t_[id(1, j + 1, i)] + comm);
      if (j == 0 && f_[j] == M_)
        while (w_[j] < b_[j]) put(j, 2);
      put(j, 1);
    }
    return true;
  }

  const Problem& p_;
  const Switches sw_;
  const int S_, M_;
  std::vector<int> f_, b_, w_;
  std::vector<int64_t> m_, max_mem_;
  std::vector<double> e_, bubble_, t_;
};

// Each device's ops in the order of their completion times (F's, then B's, then W's on ties).
Schedule schedule_by_completion(const Problem& p, const ZbGreedy& g, const std::vector<double>& t) {
  Schedule s = empty_schedule(p);
  const OpKind kinds[3] = {OpKind::kF, OpKind::kB, OpKind::kW};
  for (int j = 0; j < p.num_stages(); j++) {
    std::vector<Op>& ops = s.devices[j].compute;
    for (int type = 0; type < 3; type++)
      for (int mb = 0; mb < p.num_microbatches; mb++) ops.push_back(Op{kinds[type], j, mb});
    std::stable_sort(ops.begin(), ops.end(), [&](const Op& a, const Op& b) {
      return t[g.id(static_cast<int>(a.kind), a.stage, a.microbatch)] <
             t[g.id(static_cast<int>(b.kind), b.stage, b.microbatch)];
    });
  }
  return s;
}

}  // namespace

Result<Schedule> make_zb_auto(const Problem& p) {
  if (Status st = require_placement(p, "zb-auto", Placement::kLinear, 1); !st.ok()) return Result<Schedule>::Error(st);
  Result<Schedule> best = Result<Schedule>::Error(
      Status::Invalid("zb-auto: some device's budget, less its static memory, cannot hold the activations its "
                      "order needs"));
  double best_span_us = 0;
  for (int v = 0; v < 8; v++) {
    const Switches sw{(v & 4) != 0, (v & 2) != 0, (v & 1) != 0};
    ZbGreedy g(p, sw);
    const std::vector<double> t = g.run();
    if (t.empty()) continue;
    Schedule s = schedule_by_completion(p, g, t);
    SimResult sim = simulate(p, s, {.op_times = false, .any_timing = false});
    if (!sim.ok()) continue;  // ties on the scheduler's timeline that optpipe's order cannot keep
    if (!best.ok() || sim.timeline.max_span_us < best_span_us) {
      best_span_us = sim.timeline.max_span_us;
      best = Result<Schedule>::Of(std::move(s));
    }
  }
  return best;
}

}  // namespace optpipe
