// Families against their published closed forms (uniform costs, no communication), and every
// family against the simulator's invariants on many random problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "fixtures.h"
#include "optpipe/families.h"
#include "optpipe/passes.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

constexpr double kT = 100;         // t_F = t_B = t_W
constexpr int64_t kAct = 1 << 20;  // act_f_bytes of a whole (v = 1) stage
constexpr int64_t kStatic = 1ll << 30;

Problem uniform(int D, int M) {
  UniformSpec u;
  u.num_devices = D;
  u.num_microbatches = M;
  u.t_f_us = u.t_b_us = u.t_w_us = kT;
  u.act_f_bytes = kAct;
  u.act_w_bytes = -kAct / 4;
  u.act_input_bytes = kAct / 16;
  u.static_bytes = kStatic;
  u.mem_budget_bytes = 1ll << 40;
  return make_uniform_problem(u);
}

struct Ran {
  Problem problem;
  Timeline timeline;
};

Ran run(const char* family, const Problem& p, int chunks = 0) {
  const Family* f = find_family(family);
  EXPECT_NE(f, nullptr) << family;
  Result<FamilySchedule> fs = build_family(*f, p, chunks);
  EXPECT_TRUE(fs.ok()) << family << ": " << fs.status.message;
  Validation v = validate(fs.value.problem, fs.value.schedule, {.check_memory_budget = false});
  EXPECT_TRUE(v.ok()) << family << ": " << v.summary();
  return {fs.value.problem, v.sim.timeline};
}

// Peak live activation bytes on device d, in units of a whole stage's activation.
double peak_acts(const Ran& r, int d) { return double(r.timeline.devices[d].peak_bytes - kStatic) / kAct; }
double max_peak_acts(const Ran& r) {
  double m = 0;
  for (int d = 0; d < r.problem.num_devices; d++) m = std::max(m, peak_acts(r, d));
  return m;
}
// Idle time beyond the work: over the makespan, and over the longest per-device span (the
// zero-bubble papers' measure, which leaves out the unavoidable start-up offset).
double bubble_us(const Ran& r) { return r.timeline.makespan_us - r.problem.num_microbatches * 3 * kT; }
double span_bubble_us(const Ran& r) { return r.timeline.max_span_us - r.problem.num_microbatches * 3 * kT; }

}  // namespace

TEST(ClosedForm, OneFOneBAndGPipe) {
  for (int D : {2, 4, 8}) {
    for (int M : {1, D - 1, D, 2 * D, 4 * D + 3}) {
      if (M < 1) continue;
      Problem p = uniform(D, M);
      Ran a = run("1f1b", p), g = run("gpipe", p);
      EXPECT_DOUBLE_EQ(a.timeline.makespan_us, (M + D - 1) * 3 * kT) << "1f1b D=" << D << " M=" << M;
      EXPECT_DOUBLE_EQ(g.timeline.makespan_us, (M + D - 1) * 3 * kT) << "gpipe D=" << D << " M=" << M;
      for (int d = 0; d < D; d++) {
        EXPECT_DOUBLE_EQ(peak_acts(a, d), std::min(D - d, M)) << "1f1b D=" << D << " M=" << M << " d=" << d;
        EXPECT_DOUBLE_EQ(peak_acts(g, d), M) << "gpipe D=" << D << " M=" << M << " d=" << d;
      }
    }
  }
}

TEST(ClosedForm, ZeroBubbleH1IsAThirdOf1F1BAtItsMemory) {
  for (int D : {2, 4, 8}) {
    for (int M : {D, 2 * D, 3 * D + 1}) {
      Problem p = uniform(D, M);
      Ran a = run("1f1b", p), h1 = run("zb-h1", p);
      EXPECT_NEAR(bubble_us(h1), bubble_us(a) / 3, 1e-6) << "D=" << D << " M=" << M;
      EXPECT_LE(max_peak_acts(h1), max_peak_acts(a)) << "D=" << D << " M=" << M;
    }
  }
}

TEST(ClosedForm, ZeroBubbleH2HasNoBubbleAtTwiceTheMemory) {
  for (int D : {2, 4, 8}) {
    for (int M : {2 * D, 4 * D}) {
      Problem p = uniform(D, M);
      Ran a = run("1f1b", p), h2 = run("zb-h2", p);
      EXPECT_NEAR(span_bubble_us(h2), 0, 1e-6) << "D=" << D << " M=" << M;
      EXPECT_LE(max_peak_acts(h2), 2 * max_peak_acts(a)) << "D=" << D << " M=" << M;
      EXPECT_GT(max_peak_acts(h2), max_peak_acts(a)) << "D=" << D << " M=" << M;
    }
  }
}

// The zero-bubble paper's 1.5B setting (Qi et al., ICLR 2024, Tables 5 and 9: p = 8, m = 24,
// T_F/T_B/T_W/T_comm = 18.522/18.086/9.337/0.601 ms, M_W = 0.3664 M_B): its automatic scheduler
// reaches the published ZB-1p and ZB-2p bubble rates, cost = the longest per-device span.
TEST(Published, ZbAutoReachesTheZeroBubblePapersRates) {
  const int64_t m_b = 566624256, m_w = 207618048;
  for (const auto& [activations, published] : {std::pair{8, 0.1585}, std::pair{16, 0.0433}}) {
    Problem p = make_uniform_problem({.num_devices = 8,
                                      .num_microbatches = 24,
                                      .t_f_us = 18522,
                                      .t_b_us = 18086,
                                      .t_w_us = 9337,
                                      .t_comm_us = 601,
                                      .act_f_bytes = m_b,
                                      .act_w_bytes = -m_w,
                                      .act_input_bytes = 0,
                                      .static_bytes = 0,
                                      .mem_budget_bytes = activations * m_b});
    Result<FamilySchedule> fs = build_family(*find_family("zb-auto"), p);
    ASSERT_TRUE(fs.ok()) << fs.status.message;
    SimResult sim = simulate(fs.value.problem, fs.value.schedule);
    ASSERT_TRUE(sim.ok());
    EXPECT_TRUE(fits_budget(p, sim.timeline));
    const double span = sim.timeline.max_span_us, work = 24 * (18522.0 + 18086 + 9337);
    EXPECT_NEAR((span - work) / span, published, 5e-5) << activations << " M_B";
  }
}

TEST(ClosedForm, InterleavedDividesTheBubbleByV) {
  for (int D : {2, 4, 8}) {
    for (int v : {2, 3, 4}) {
      for (int M : {D, 2 * D, 4 * D}) {
        Problem p = uniform(D, M);
        Ran a = run("1f1b", p), il = run("interleaved-1f1b", p, v);
        EXPECT_NEAR(bubble_us(il), bubble_us(a) / v, 1e-6) << "D=" << D << " v=" << v << " M=" << M;
      }
    }
  }
}

// torch's ScheduleLoopedBFS: with M ≥ D every device runs its forwards back to back, so the bubble
// is GPipe's ÷ v ((D − 1) · 3T / v), at GPipe's memory (every microbatch through every chunk).
TEST(ClosedForm, LoopedBfsDividesTheBubbleByVAtGPipesMemory) {
  for (int v : {1, 2, 3, 4})  // thirds of a byte count round down: 1e-3 of an activation
    for (auto [D, M] : {std::pair{4, 8}, {4, 4}, {8, 16}}) {
      const Problem p = uniform(D, M);
      Ran bfs = run("looped-bfs", p, v);
      EXPECT_NEAR(bubble_us(bfs), (D - 1) * 3 * kT / v, 1e-6) << "D=" << D << " M=" << M << " v=" << v;
      EXPECT_NEAR(peak_acts(bfs, 0), M, 1e-3) << "D=" << D << " M=" << M << " v=" << v;
    }
}

// torch's ScheduleInterleavedZeroBubble, worked by hand from its _get_1f1b_rank_ops with
// enable_zero_bubble (D 2, M 4, v 2: rounds of 2; warm-up 3 and 2 forwards); then its bubble
// against interleaved 1F1B's at the same v, at most that peak memory and a W for every B.
TEST(ClosedForm, InterleavedZeroBubbleIsTorchsOrder) {
  Ran zb = run("interleaved-zb", uniform(2, 4), 2);
  Result<FamilySchedule> fs = build_family(*find_family("interleaved-zb"), uniform(2, 4), 2);
  ASSERT_TRUE(fs.ok()) << fs.status.message;
  auto order = [&](int d) {
    std::string out;
    for (const Op& op : fs.value.schedule.devices[d].compute) out += (out.empty() ? "" : ", ") + op_name(op);
    return out;
  };
  EXPECT_EQ(order(0),
            "F0 s0, F1 s0, F0 s2, F1 s2, B0 s2, W0 s2, F2 s0, B1 s2, W1 s2, F3 s0, B0 s0, W0 s0, F2 s2, B1 s0, "
            "W1 s0, F3 s2, B2 s2, W2 s2, B3 s2, W3 s2, B2 s0, W2 s0, B3 s0, W3 s0");
  EXPECT_EQ(order(1),
            "F0 s1, F1 s1, F0 s3, B0 s3, F1 s3, B1 s3, W0 s3, F2 s1, B0 s1, W1 s3, F3 s1, B1 s1, W0 s1, F2 s3, "
            "B2 s3, W1 s1, F3 s3, B3 s3, W2 s3, B2 s1, W3 s3, B3 s1, W2 s1, W3 s1");
  EXPECT_GT(zb.timeline.makespan_us, 0);
  for (int v : {2, 3, 4})
    for (auto [D, M] : {std::pair{4, 8}, {4, 16}, {8, 16}}) {
      const Problem p = uniform(D, M);
      Ran z = run("interleaved-zb", p, v), i = run("interleaved-1f1b", p, v);
      EXPECT_LT(bubble_us(z), bubble_us(i)) << "D=" << D << " M=" << M << " v=" << v;
      EXPECT_LE(max_peak_acts(z), max_peak_acts(i) + 1e-9) << "D=" << D << " M=" << M << " v=" << v;
    }
  // torch refuses an M its rounds do not divide: 10 microbatches on 4 ranks are 2 rounds of 5; 9 are not.
  EXPECT_TRUE(build_family(*find_family("interleaved-zb"), uniform(4, 10), 2).ok());
  Result<FamilySchedule> refused = build_family(*find_family("interleaved-zb"), uniform(4, 9), 2);
  EXPECT_NE(refused.status.message.find("multiple of its rounds (2)"), std::string::npos) << refused.status.message;
}

TEST(ClosedForm, VShapesTradeMemory) {
  for (int D : {4, 6, 8}) {
    const int M = 4 * D;
    Problem p = uniform(D, M);
    Ran a = run("1f1b", p), zbv = run("zb-v", p), half = run("v-half", p), vmin = run("v-min", p);
    const double full = max_peak_acts(a);  // = D
    EXPECT_NEAR(span_bubble_us(zbv), 0, 1e-6) << "zb-v D=" << D;
    EXPECT_LE(max_peak_acts(zbv), full) << "zb-v D=" << D;
    EXPECT_LE(max_peak_acts(half), (D + 2) / 2) << "v-half D=" << D;  // ⌊(D+2)/2⌋ ≈ D/2
    EXPECT_LE(max_peak_acts(vmin), (D + 4) / 3) << "v-min D=" << D;   // ⌊(D+4)/3⌋ ≈ D/3
    EXPECT_LT(bubble_us(half), bubble_us(a)) << "v-half D=" << D;
  }
}

// ---- properties over random problems ----

namespace {

// Recomputes what the simulator derived, the slow and obvious way.
void check_invariants(const Problem& p, const Schedule& s, const Timeline& t, const std::string& what) {
  const int S = p.num_stages(), M = p.num_microbatches;
  auto start = [&](const Op& op) { return t.start_us[op_id(p, op)]; };
  auto end = [&](const Op& op) { return t.end_us[op_id(p, op)]; };
  auto present = [&](const Op& op) { return !std::isnan(t.start_us[op_id(p, op)]); };
  const double eps = 1e-6;

  // No two ops overlap on a compute stream or on a host-link channel.
  std::vector<std::vector<std::pair<double, double>>> d2h(p.num_devices), h2d(p.num_devices);
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceSchedule& ds = s.devices[d];
    for (size_t k = 1; k < ds.compute.size(); k++)
      EXPECT_LE(end(ds.compute[k - 1]), start(ds.compute[k]) + eps) << what << " device " << d;
    for (const Op& op : ds.offloads) d2h[p.devices[d].host_link].push_back({start(op), end(op)});
    for (const ReloadEntry& r : ds.reloads) h2d[p.devices[d].host_link].push_back({start(r.reload), end(r.reload)});
  }
  for (auto* channels : {&d2h, &h2d})
    for (auto& c : *channels) {
      std::sort(c.begin(), c.end());
      for (size_t k = 1; k < c.size(); k++) EXPECT_LE(c[k - 1].second, c[k].first + eps) << what << " channel";
    }

  // Every dependency respected, with the communication hop between devices.
  auto hop = [&](int a, int b) { return p.device_of(a) == p.device_of(b) ? 0.0 : p.t_comm_us; };
  for (int st = 0; st < S; st++) {
    for (int i = 0; i < M; i++) {
      const Op f{OpKind::kF, st, i};
      const Op back = present(Op{OpKind::kB, st, i}) ? Op{OpKind::kB, st, i} : Op{OpKind::kBW, st, i};
      if (st > 0) {
        EXPECT_GE(start(f) + eps, end(Op{OpKind::kF, st - 1, i}) + hop(st - 1, st)) << what;
      }
      EXPECT_GE(start(back) + eps, end(f)) << what;
      if (st + 1 < S) {
        const Op up = present(Op{OpKind::kB, st + 1, i}) ? Op{OpKind::kB, st + 1, i} : Op{OpKind::kBW, st + 1, i};
        EXPECT_GE(start(back) + eps, end(up) + hop(st + 1, st)) << what;
      }
      if (back.kind == OpKind::kB) {
        EXPECT_GE(start(Op{OpKind::kW, st, i}) + eps, end(back)) << what;
      }
      const Op rel{OpKind::kReload, st, i};
      if (present(rel)) {
        EXPECT_GE(start(rel) + eps, end(Op{OpKind::kOffload, st, i})) << what;
        EXPECT_GE(start(back) + eps, end(rel)) << what;
      }
      const Op wait{OpKind::kWait, st, i};
      if (present(wait)) {
        EXPECT_GE(start(wait) + eps, end(Op{OpKind::kOffload, st, i})) << what;
        EXPECT_DOUBLE_EQ(start(wait), end(wait)) << what;
      }
    }
  }
  for (const DeviceSchedule& ds : s.devices)
    for (const ReloadEntry& r : ds.reloads) {
      EXPECT_GE(start(r.reload) + eps, start(r.anchor)) << what;
      for (const Op& x : r.after) EXPECT_GE(start(r.reload) + eps, end(x)) << what;
    }

  // Memory: replay every delta, sorted by time with frees first; the peak must match and every
  // device must end where it started.
  for (int d = 0; d < p.num_devices; d++) {
    struct Ev {
      double time;
      int is_alloc;
      int64_t delta;
    };
    std::vector<Ev> ev;
    for (const Op& op : s.devices[d].compute) {
      const StageSpec& st = p.stages[op.stage];
      const bool rec = present(Op{OpKind::kR, op.stage, op.microbatch});
      switch (op.kind) {
        case OpKind::kF:
          ev.push_back({start(op), 1, st.act_f_bytes + st.ws_f_bytes});
          ev.push_back({end(op), 0, -st.ws_f_bytes - (rec ? st.act_f_bytes - st.act_input_bytes : 0)});
          break;
        case OpKind::kR:
          ev.push_back({start(op), 1, st.act_f_bytes - st.act_input_bytes + st.ws_f_bytes});
          ev.push_back({end(op), 0, -st.ws_f_bytes});
          break;
        case OpKind::kB:
          ev.push_back({start(op), 1, st.ws_b_bytes});
          ev.push_back({end(op), 0, st.act_b_bytes - st.ws_b_bytes});
          break;
        case OpKind::kW:
          ev.push_back({start(op), 1, st.ws_w_bytes});
          ev.push_back({end(op), 0, st.act_w_bytes - st.ws_w_bytes});
          break;
        case OpKind::kBW: {
          const int64_t ws = std::max(st.ws_b_bytes, st.ws_w_bytes);
          ev.push_back({start(op), 1, ws});
          ev.push_back({end(op), 0, st.act_b_bytes + st.act_w_bytes - ws});
          break;
        }
        default: break;
      }
    }
    for (const Op& op : s.devices[d].offloads) ev.push_back({end(op), 0, -p.stages[op.stage].act_f_bytes});
    for (const ReloadEntry& r : s.devices[d].reloads)
      ev.push_back({start(r.reload), 1, p.stages[r.reload.stage].act_f_bytes});
    std::stable_sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) {
      return a.time < b.time || (a.time == b.time && a.is_alloc < b.is_alloc);
    });
    int64_t bytes = p.devices[d].static_bytes, peak = bytes;
    for (const Ev& e : ev) {
      bytes += e.delta;
      peak = std::max(peak, bytes);
    }
    EXPECT_EQ(bytes, p.devices[d].static_bytes) << what << " device " << d << ": memory does not return to static";
    EXPECT_EQ(peak, t.devices[d].peak_bytes) << what << " device " << d;
  }

  // The makespan covers every device's work; the bubble ratio follows from busy time.
  double busy = 0;
  for (int d = 0; d < p.num_devices; d++) {
    EXPECT_GE(t.makespan_us + eps, t.devices[d].busy_us) << what;
    busy += t.devices[d].busy_us;
  }
  EXPECT_NEAR(t.bubble_ratio, 1 - busy / (p.num_devices * t.makespan_us), 1e-9) << what;
}

}  // namespace

TEST(Property, EveryFamilyValidatesAndSimulatesConsistently) {
  std::mt19937 rng(20261129);
  int checked = 0;
  for (int trial = 0; trial < 150; trial++) {
    const Problem base = random_problem(rng);
    for (const Family& f : families()) {
      Result<FamilySchedule> fs = build_family(f, base);
      if (!fs.ok()) {
        // A family may decline a problem, but only with a reason.
        EXPECT_FALSE(fs.status.message.empty()) << f.name;
        continue;
      }
      const std::string what = std::string(f.name) + " trial " + std::to_string(trial) +
                               " D=" + std::to_string(base.num_devices) + " M=" + std::to_string(base.num_microbatches);
      Validation v = validate(fs.value.problem, fs.value.schedule, {.check_memory_budget = false});
      ASSERT_TRUE(v.ok()) << what << ": " << v.summary();
      check_invariants(fs.value.problem, fs.value.schedule, v.sim.timeline, what);
      checked++;
    }
  }
  EXPECT_GT(checked, 150 * 8);  // most families handle most problems
}

// The exact models' gates on random schedules: every family with the PipeOffload pass applied,
// then a WAIT for a random offload before a random later compute op, and some reloads held
// `after` another offload — each placed where it cannot deadlock (no forward it needs, its own
// or one queued before it on the channel, comes after the gate). The gates hold, and every
// other invariant still does.
TEST(Property, WaitsAndHeldReloadsSimulateConsistently) {
  std::mt19937 rng(20261130);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  int gated = 0;
  for (int trial = 0; trial < 60; trial++) {
    const Problem base = random_problem(rng);
    for (const Family& f : families()) {
      Result<FamilySchedule> fs = build_family(f, base);
      if (!fs.ok()) continue;
      const Problem& p = fs.value.problem;
      Schedule s = add_offloads(p, fs.value.schedule, 1 + pick(3));
      for (DeviceSchedule& ds : s.devices) {
        if (ds.offloads.empty()) continue;
        auto position = [&](const Op& op) {
          return static_cast<int>(std::find(ds.compute.begin(), ds.compute.end(), op) - ds.compute.begin());
        };
        // Up to which compute position every offload up to k in channel order has had its F.
        std::vector<int> ready(ds.offloads.size());
        for (size_t k = 0; k < ds.offloads.size(); k++)
          ready[k] = std::max(k > 0 ? ready[k - 1] : 0,
                              position(Op{OpKind::kF, ds.offloads[k].stage, ds.offloads[k].microbatch}) + 1);
        const size_t k = pick(static_cast<int>(ds.offloads.size()));
        const int at = ready[k] + pick(static_cast<int>(ds.compute.size()) - ready[k] + 1);
        ds.compute.insert(ds.compute.begin() + at, Op{OpKind::kWait, ds.offloads[k].stage, ds.offloads[k].microbatch});
        for (ReloadEntry& r : ds.reloads) {
          if (pick(2)) continue;
          const int b = position(Op{OpKind::kB, r.reload.stage, r.reload.microbatch});
          const int back = b < static_cast<int>(ds.compute.size())
                               ? b
                               : position(Op{OpKind::kBW, r.reload.stage, r.reload.microbatch});
          const size_t j = pick(static_cast<int>(ds.offloads.size()));
          if (ready[j] <= back) r.after = {ds.offloads[j]};
        }
        gated++;
      }
      const std::string what = std::string(f.name) + " gated, trial " + std::to_string(trial);
      Validation v = validate(p, s, {.check_memory_budget = false});
      ASSERT_TRUE(v.ok()) << what << ": " << v.summary();
      check_invariants(p, s, v.sim.timeline, what);
    }
  }
  EXPECT_GT(gated, 60);
}

TEST(MemorySaving, PipeOffloadMovesLongLivedActivationsWhenTheLinkIsFast) {
  Problem p = uniform(4, 16);
  p.host_link = {1000, 1000, 0};  // transfers far shorter than lifespans
  Ran base = run("interleaved-1f1b", p), off = run("pipeoffload", p);
  int64_t moved = 0;
  for (const DeviceFigures& f : off.timeline.devices) moved += f.offload_bytes;
  EXPECT_GT(moved, 0);
  EXPECT_LT(max_peak_acts(off), max_peak_acts(base));

  p.host_link = {0.001, 0.001, 0};  // 1 MB/s: nothing is worth moving
  off = run("pipeoffload", p);
  for (const DeviceFigures& f : off.timeline.devices) EXPECT_EQ(f.offload_bytes, 0);
  EXPECT_DOUBLE_EQ(off.timeline.makespan_us, base.timeline.makespan_us);
}

TEST(MemorySaving, RecomputeKeepsOnlyInputsInFlight) {
  const int D = 4, M = 8;
  Problem p = uniform(D, M);
  Ran rc = run("1f1b-recompute", p);
  for (int d = 0; d < D; d++) {
    // In flight: the inputs of 1F1B's min(D−d, M) forwards, plus one full activation being used.
    const double inputs = std::min(D - d, M) * double(kAct / 16) / kAct;
    EXPECT_LE(peak_acts(rc, d), inputs + 1) << "d=" << d;
    EXPECT_EQ(rc.timeline.devices[d].num_recomputes, M);
  }
  EXPECT_GT(rc.timeline.makespan_us, run("1f1b", p).timeline.makespan_us);
}

TEST(Property, ZeroBytesAndInstantTransfersStillValidate) {
  // Nothing to move, then one byte per activation over a link so fast that transfers take no
  // time: offload passes must not anchor a reload to the backward it feeds.
  for (const int64_t act_bytes : {0, 1}) {
    Problem p = uniform(4, 8);
    for (StageSpec& st : p.stages) {
      st.act_f_bytes = act_bytes;
      st.act_b_bytes = -act_bytes;
      st.act_w_bytes = st.act_input_bytes = 0;
    }
    p.host_link = {1e6, 1e6, 0};
    size_t offloads = 0;
    for (const Family& f : families()) {
      Result<FamilySchedule> fs = build_family(f, p);
      if (!fs.ok()) continue;
      Validation v = validate(fs.value.problem, fs.value.schedule);
      EXPECT_TRUE(v.ok()) << f.name << ": " << v.summary();
      const Schedule offloaded = add_offloads(fs.value.problem, fs.value.schedule);
      for (const DeviceSchedule& ds : offloaded.devices) offloads += ds.offloads.size();
      Validation vo = validate(fs.value.problem, offloaded);
      EXPECT_TRUE(vo.ok()) << f.name << " +offload: " << vo.summary();
    }
    if (act_bytes > 0) {
      EXPECT_GT(offloads, 0u) << "no reload was anchored: the test exercised nothing";
    }
  }
}
