// The one file that talks to Gecode: the CP model of cp.h, its branch-and-bound search under a
// time limit, and the schedule read back from the best solution.
#include <gecode/int.hh>
#include <gecode/minimodel.hh>
#include <gecode/search.hh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "exact/by_start.h"
#include "exact/grid.h"
#include "optpipe/cp.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

// Stops at the time limit, or after max_nodes nodes (0: no node limit).
class TimeOrNodeStop : public Gecode::Search::Stop {
 public:
  TimeOrNodeStop(unsigned long time_ms, int64_t max_nodes) : time_(time_ms), max_nodes_(max_nodes) {}
  bool stop(const Gecode::Search::Statistics& s, const Gecode::Search::Options& o) override {
    return time_.stop(s, o) || (max_nodes_ > 0 && static_cast<int64_t>(s.node) >= max_nodes_);
  }

 private:
  Gecode::Search::TimeStop time_;
  int64_t max_nodes_;
};

}  // namespace

namespace {

using namespace Gecode;

class PipeSpace : public IntMinimizeSpace {
 public:
  IntVarArray start;
  IntVar makespan;
  // With recompute, per stage·M + microbatch: whether F(s,i) is recomputed, and R's start (F's
  // end when it is not, so that every lifetime below has a length ≥ 0).
  BoolVarArray recompute;
  IntVarArray r_start;
  // With offload, likewise: whether F(s,i)'s activation goes to the host, and the offload's and
  // the reload's starts (both F's end when it does not).
  BoolVarArray offload;
  IntVarArray off_start, rel_start;

  PipeSpace(const Problem& p, const Grid& g, bool memory, bool with_recompute, bool with_offload)
      : start(*this, static_cast<int>(g.ops.size()), 0, g.horizon), makespan(*this, 0, g.horizon) {
    const Posting c{p, g, p.num_stages(), p.num_microbatches, memory && with_recompute, memory && with_offload};
    post_precedences(c);
    if (c.rc) post_recompute(c);
    if (c.oc) post_offload(c);
    const BoolVar always(*this, 1, 1);
    for (int dev = 0; dev < p.num_devices; dev++) {
      post_device_order(c, dev, always);
      if (memory && !post_memory(c, dev, always)) {
        fail();
        return;
      }
    }
    if (c.rc)
      branch(*this, recompute, BOOL_VAR_NONE(),
             BOOL_VAL_MAX());  // recomputing first: the search reaches pipelined orders sooner
    if (c.oc)
      branch(*this, offload, BOOL_VAR_NONE(),
             BOOL_VAL_MAX());  // likewise: keeping first took seconds where this takes milliseconds
    IntVarArgs times;
    times << start;
    if (c.rc) times << r_start;
    if (c.oc) times << off_start << rel_start;
    branch(*this, times, INT_VAR_MIN_MIN(), INT_VAL_MIN());
    branch(*this, makespan, INT_VAL_MIN());  // fixed last, at the latest end
  }

  PipeSpace(PipeSpace& other) : IntMinimizeSpace(other) {
    start.update(*this, other.start);
    makespan.update(*this, other.makespan);
    recompute.update(*this, other.recompute);
    r_start.update(*this, other.r_start);
    offload.update(*this, other.offload);
    off_start.update(*this, other.off_start);
    rel_start.update(*this, other.rel_start);
  }
  Space* copy() override { return new PipeSpace(*this); }
  IntVar cost() const override { return makespan; }

 private:
  // What every posting step reads: the problem on its grid, and whether recomputes and offloads
  // are decided.
  struct Posting {
    const Problem& p;
    const Grid& g;
    int S, M;
    bool rc, oc;
    int index(OpKind k, int s, int i) const { return g.index[op_id(p, Op{k, s, i})]; }
    int d(OpKind k, int s, int i) const { return g.dur[index(k, s, i)]; }
  };
  IntVar var(const Posting& c, OpKind k, int s, int i) { return start[c.index(k, s, i)]; }

  // Dataflow between stages and microbatches, each kind in microbatch order, and the makespan.
  void post_precedences(const Posting& c) {
    const Problem& p = c.p;
    const int hop = c.g.hop;
    auto hop_between = [&](int a, int b) { return p.device_of(a) == p.device_of(b) ? 0 : hop; };
    for (int s = 0; s < c.S; s++)
      for (int i = 0; i < c.M; i++) {
        if (s > 0)
          rel(*this, var(c, OpKind::kF, s, i) >=
                         var(c, OpKind::kF, s - 1, i) + c.d(OpKind::kF, s - 1, i) + hop_between(s - 1, s));
        rel(*this, var(c, OpKind::kB, s, i) >= var(c, OpKind::kF, s, i) + c.d(OpKind::kF, s, i));
        if (s + 1 < c.S)
          rel(*this, var(c, OpKind::kB, s, i) >=
                         var(c, OpKind::kB, s + 1, i) + c.d(OpKind::kB, s + 1, i) + hop_between(s + 1, s));
        rel(*this, var(c, OpKind::kW, s, i) >= var(c, OpKind::kB, s, i) + c.d(OpKind::kB, s, i));
        rel(*this, makespan >= var(c, OpKind::kW, s, i) + c.d(OpKind::kW, s, i));
        if (i + 1 < c.M)
          for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW})
            rel(*this, var(c, k, s, i + 1) >= var(c, k, s, i) + c.d(k, s, i));
      }
  }

  // An optional R per stage and microbatch, between its F and its B.
  void post_recompute(const Posting& c) {
    const int S = c.S, M = c.M;
    recompute = BoolVarArray(*this, S * M, 0, 1);
    r_start = IntVarArray(*this, S * M, 0, c.g.horizon);
    for (int s = 0; s < S; s++)
      for (int i = 0; i < M; i++) {
        const BoolVar r = recompute[s * M + i];
        const IntVar R = r_start[s * M + i], F = var(c, OpKind::kF, s, i), B = var(c, OpKind::kB, s, i);
        if (c.p.stages[s].act_f_bytes <= c.p.stages[s].act_input_bytes) rel(*this, r, IRT_EQ, 0);  // nothing to drop
        rel(*this, R >= F + c.d(OpKind::kF, s, i));
        rel(*this, r >> (B >= R + c.g.r_dur[s]));
        rel(*this, (!r) >> (R == F + c.d(OpKind::kF, s, i)));
      }
  }

  // An optional offload and reload per stage and microbatch, one transfer at a time per direction
  // of each host link, whichever devices share it.
  void post_offload(const Posting& c) {
    const Problem& p = c.p;
    const int S = c.S, M = c.M;
    offload = BoolVarArray(*this, S * M, 0, 1);
    off_start = IntVarArray(*this, S * M, 0, c.g.horizon);
    rel_start = IntVarArray(*this, S * M, 0, c.g.horizon);
    for (int s = 0; s < S; s++)
      for (int i = 0; i < M; i++) {
        const BoolVar o = offload[s * M + i];
        const IntVar O = off_start[s * M + i], L = rel_start[s * M + i];
        const IntVar F_end = expr(*this, var(c, OpKind::kF, s, i) + c.d(OpKind::kF, s, i)),
                     B = var(c, OpKind::kB, s, i);
        if (p.stages[s].act_f_bytes <= 0) rel(*this, o, IRT_EQ, 0);
        if (c.rc) rel(*this, o + recompute[s * M + i] <= 1);
        rel(*this, O >= F_end);
        rel(*this, o >> (L >= O + c.g.off_dur[s]));
        rel(*this, o >> (B >= L + c.g.rel_dur[s]));
        rel(*this, (!o) >> (O == F_end));
        rel(*this, (!o) >> (L == F_end));
      }
    int max_link = 0;
    for (const DeviceSpec& dev : p.devices) max_link = std::max(max_link, dev.host_link);
    for (int link = 0; link <= max_link; link++) {
      IntVarArgs os, ls;
      IntArgs od, ld;
      BoolVarArgs on;
      for (int s = 0; s < S; s++)
        for (int i = 0; i < M && p.devices[p.device_of(s)].host_link == link; i++) {
          os << off_start[s * M + i];
          ls << rel_start[s * M + i];
          od << c.g.off_dur[s];
          ld << c.g.rel_dur[s];
          on << offload[s * M + i];
        }
      if (on.size() == 0) continue;
      unary(*this, os, od, on);
      unary(*this, ls, ld, on);
    }
  }

  // One op at a time on the device: its F, B and W, and its recomputes when present.
  void post_device_order(const Posting& c, int dev, const BoolVar& always) {
    IntVarArgs starts;
    IntArgs durs;
    BoolVarArgs present;
    for (size_t k = 0; k < c.g.ops.size(); k++)
      if (c.p.device_of(c.g.ops[k].stage) == dev) {
        starts << start[static_cast<int>(k)];
        durs << c.g.dur[k];
        present << always;
      }
    for (int s = 0; s < c.S && c.rc; s++)
      for (int i = 0; i < c.M && c.p.device_of(s) == dev; i++) {
        starts << r_start[s * c.M + i];
        durs << c.g.r_dur[s];
        present << recompute[s * c.M + i];
      }
    unary(*this, starts, durs, present);
  }

  // Memory as lifetimes on a cumulative resource. Kept: what B frees lives from F's start to B's
  // end, what W frees to W's end. Recomputed: all of F's bytes while F runs, the input until R
  // starts, all again from R's start to B's end, then what W frees. Heights in MiB, rounded up;
  // the capacity rounded down. A mandatory task taller than the capacity never fits (Gecode would
  // refuse to post it): false; an optional one is switched off.
  bool post_memory(const Posting& c, int dev, const BoolVar& always) {
    const Problem& p = c.p;
    const int M = c.M;
    const bool rc = c.rc, oc = c.oc;
    constexpr double kMiB = 1 << 20;
    const double room = static_cast<double>(p.devices[dev].mem_budget_bytes - p.devices[dev].static_bytes) / kMiB;
    const int capacity = room < 0 ? -1 : static_cast<int>(std::floor(std::min(room, 1e9)));
    IntVarArgs ts, tp, te;
    IntArgs height;
    BoolVarArgs live;
    bool too_tall = capacity < 0;
    auto task = [&](IntVar from, IntVar to, int64_t bytes, BoolVar when) {
      if (bytes <= 0) return;
      const double h = std::ceil(bytes / kMiB);
      if (h > capacity) {
        if (when.assigned() && when.val() == 1)
          too_tall = true;
        else
          rel(*this, when, IRT_EQ, 0);
        return;
      }
      ts << from;
      tp << expr(*this, to - from);
      te << to;
      height << static_cast<int>(h);
      live << when;
    };
    for (int s = 0; s < c.S; s++) {
      if (p.device_of(s) != dev) continue;
      const StageSpec& st = p.stages[s];
      for (int i = 0; i < M; i++) {
        const IntVar F = var(c, OpKind::kF, s, i);
        const IntVar B_end = expr(*this, var(c, OpKind::kB, s, i) + c.d(OpKind::kB, s, i));
        const IntVar W_end = expr(*this, var(c, OpKind::kW, s, i) + c.d(OpKind::kW, s, i));
        const BoolVar kept = rc && oc ? expr(*this, !recompute[s * M + i] && !offload[s * M + i])
                             : rc     ? expr(*this, !recompute[s * M + i])
                             : oc     ? expr(*this, !offload[s * M + i])
                                      : always;
        task(F, B_end, -st.act_b_bytes, kept);
        task(F, W_end, -st.act_w_bytes, kept);
        if (oc) {
          // Offloaded: all of F's bytes until the offload ends, again from the reload's start.
          const BoolVar o = offload[s * M + i];
          const IntVar L = rel_start[s * M + i];
          task(F, expr(*this, off_start[s * M + i] + c.g.off_dur[s]), st.act_f_bytes, o);
          task(L, B_end, -st.act_b_bytes, o);
          task(L, W_end, -st.act_w_bytes, o);
        }
        if (!rc) continue;
        const BoolVar r = recompute[s * M + i];
        const IntVar F_end = expr(*this, F + c.d(OpKind::kF, s, i)), R = r_start[s * M + i];
        task(F, F_end, st.act_f_bytes, r);
        task(F_end, R, st.act_input_bytes, r);
        task(R, B_end, st.act_f_bytes, r);
        task(B_end, W_end, -st.act_w_bytes, r);
      }
    }
    if (too_tall) return false;
    if (ts.size() > 0) cumulative(*this, capacity, ts, tp, te, height, live);
    return true;
  }
};

// The schedule of the best solution, read back as every exact model's is (grid.h).
void read_back_schedule(const Problem& p, const Grid& g, const PipeSpace& best, bool offload, CpSolution* out) {
  const int M = p.num_microbatches;
  std::vector<Op> ops = g.ops;
  for (int k = 0; k < best.recompute.size(); k++)
    if (best.recompute[k].val()) ops.push_back({OpKind::kR, k / M, k % M});
  auto start = [&](const Op& op) -> double {
    return op.kind == OpKind::kR ? best.r_start[op.stage * M + op.microbatch].val()
                                 : best.start[g.index[op_id(p, op)]].val();
  };
  std::vector<TransferTimes> transfers;
  if (offload)
    for (int k = 0; k < best.offload.size(); k++)
      if (best.offload[k].val())
        transfers.push_back({k / M, k % M, static_cast<double>(best.off_start[k].val()),
                             static_cast<double>(best.off_start[k].val() + g.off_dur[k / M]),
                             static_cast<double>(best.rel_start[k].val())});
  ReadBack r = read_back(p, g, ops, start, std::move(transfers), "CP");
  out->schedule = std::move(r.schedule);
  out->objective_us = r.objective_us;
  if (!r.status.ok()) out->status = r.status;
}

CpSolution solve_cp_or_throw(const Problem& p, const CpOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  CpSolution out;
  out.status = check_problem(p);
  if (out.status.ok()) out.status = check_no_recompute_layers(p);
  if (!out.status.ok()) return out;
  const Grid g =
      make_grid(p, options.recompute, options.memory && options.offload, options.unit_us, /*transfers_round_up=*/true);
  auto root = std::make_unique<PipeSpace>(p, g, options.memory, options.recompute, options.offload);
  if (root->status() == SS_FAILED) {
    out.status = Status::Infeasible("the CP model has no solution: nothing fits the budget");
    return out;
  }
  out.bound_us = root->makespan.min() * g.unit_us;  // what propagation alone proves
  Search::Options so;
  const auto time_limit_ms = static_cast<unsigned long>(std::max(1.0, options.time_limit_s * 1000));
  TimeOrNodeStop stop(time_limit_ms, options.max_nodes);
  so.stop = &stop;
  BAB<PipeSpace> engine(root.get(), so);
  std::unique_ptr<PipeSpace> best;
  while (PipeSpace* s = engine.next()) best.reset(s);
  out.nodes = static_cast<int64_t>(engine.statistics().node);
  out.proven_optimal = !engine.stopped();
  if (!best) {
    // A search that finished without a solution proves there is none.
    out.status = out.proven_optimal ? Status::Infeasible("the CP model has no solution: nothing fits the budget")
                                    : Status::TimeLimit("the CP search found no solution within its time limit");
  } else {
    if (out.proven_optimal) out.bound_us = best->makespan.val() * g.unit_us;
    read_back_schedule(p, g, *best, options.memory && options.offload, &out);
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

CpSolution solve_cp(const Problem& p, const CpOptions& options) {
  try {
    return solve_cp_or_throw(p, options);
  } catch (const Gecode::Exception& e) {
    // Gecode refuses what it cannot represent (e.g. values beyond its integer limits).
    CpSolution out;
    out.status = Status::Invalid(std::string("the CP model cannot be posted: ") + e.what());
    return out;
  }
}

}  // namespace optpipe
