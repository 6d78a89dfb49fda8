// Memory under any timing: the worst-case analysis, the gates that bound it, the simulator's
// gated mode (the runtime's rule) and the noise evaluation.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "fixtures.h"
#include "optpipe/any_timing.h"
#include "optpipe/families.h"
#include "optpipe/files.h"
#include "optpipe/json_io.h"
#include "optpipe/noise.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"
#include "optpipe/validate.h"

using namespace optpipe;

namespace {

constexpr int64_t kAct = 1 << 30, kWs = 1 << 28, kStatic = 4ll << 30;

Op op(OpKind k, int stage, int mb) { return Op{k, stage, mb}; }

// Two devices, two microbatches, fused backwards. Device 0 runs F0 F1 BW0 BW1 and idles from
// F1's end until BW0's gradient arrives; meanwhile F1's activation goes to the host, to come back
// after BW0. BW0 allocates a workspace when it starts. Nominally the offload has long ended by
// then, so the device holds at most two activations; but if the offload ran late, BW0 would
// start with F1's activation still resident.
struct OneOffload {
  Problem p;
  Schedule s;
  OneOffload() {
    UniformSpec u;
    u.num_devices = 2;
    u.num_microbatches = 2;
    u.act_f_bytes = kAct;
    u.act_w_bytes = 0;
    u.static_bytes = kStatic;
    u.mem_budget_bytes = kStatic + 2 * kAct + kWs / 2;
    p = make_uniform_problem(u);
    for (StageSpec& st : p.stages) st.ws_b_bytes = kWs;
    p.host_link = {1000, 1000, 0};  // 1 GiB in ~1 ms, inside the 2 ms idle gap
    s.placement = Placement::kLinear;
    s.devices.resize(2);
    s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kBW, 0, 0), op(OpKind::kBW, 0, 1)};
    s.devices[0].offloads = {op(OpKind::kOffload, 0, 1)};
    s.devices[0].reloads = {{op(OpKind::kReload, 0, 1), op(OpKind::kBW, 0, 0), {op(OpKind::kBW, 0, 0)}}};
    s.devices[1].compute = {op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0), op(OpKind::kF, 1, 1), op(OpKind::kBW, 1, 1)};
  }
};

TEST(AnyTiming, AnOffloadCountsAsResidentUntilAWaitMakesItFree) {
  OneOffload x;
  SimResult r = simulate(x.p, x.s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  const DeviceFigures& f = r.timeline.devices[0];
  EXPECT_EQ(f.peak_bytes, kStatic + 2 * kAct);              // nominally: two activations, then one and a workspace
  EXPECT_EQ(f.worst_peak_bytes, kStatic + 2 * kAct + kWs);  // BW0 may start before the offload ends
  EXPECT_EQ(f.worst_peak_op, op(OpKind::kBW, 0, 0));
  EXPECT_TRUE(fits_budget(x.p, r.timeline));
  EXPECT_FALSE(fits_any_timing(x.p, r.timeline));

  // A WAIT before BW0 makes the offload's free count.
  Schedule waited = x.s;
  waited.devices[0].compute.insert(waited.devices[0].compute.begin() + 2, op(OpKind::kWait, 0, 1));
  SimResult w = simulate(x.p, waited);
  ASSERT_TRUE(w.ok()) << w.status.message;
  EXPECT_EQ(w.timeline.devices[0].worst_peak_bytes, kStatic + 2 * kAct);
  EXPECT_TRUE(fits_any_timing(x.p, w.timeline));
  EXPECT_EQ(w.timeline.makespan_us, r.timeline.makespan_us);  // it had ended by then anyway

  // A WAIT after BW0 comes too late to count there.
  Schedule late = x.s;
  late.devices[0].compute.insert(late.devices[0].compute.begin() + 3, op(OpKind::kWait, 0, 1));
  EXPECT_EQ(simulate(x.p, late).timeline.devices[0].worst_peak_bytes, kStatic + 2 * kAct + kWs);

  // Without its `after`, the reload may start as soon as BW0 does: F0's activation, BW0's
  // workspace and the reload at once.
  Schedule early = waited;
  early.devices[0].reloads[0].after.clear();
  EXPECT_EQ(simulate(x.p, early).timeline.devices[0].worst_peak_bytes, kStatic + 2 * kAct + kWs);
}

TEST(AnyTiming, GatingAddsTheWaitTheNominalRunCountedOn) {
  OneOffload x;
  SimResult r = simulate(x.p, x.s);
  Gated g = gate_for_any_timing(x.p, x.s, r.timeline);
  EXPECT_EQ(g.waits_added, 1);
  EXPECT_EQ(g.schedule.devices[0].compute[2], op(OpKind::kWait, 0, 1));
  SimResult after = simulate(x.p, g.schedule);
  ASSERT_TRUE(after.ok()) << after.status.message;
  EXPECT_TRUE(fits_any_timing(x.p, after.timeline));
  EXPECT_EQ(after.timeline.makespan_us, r.timeline.makespan_us);
  // A schedule that already fits under any timing is left as it is.
  Gated again = gate_for_any_timing(x.p, g.schedule, after.timeline);
  EXPECT_EQ(again.waits_added + again.reload_gates_added, 0);
  // The reload's gates were not needed here: pruned, only the WAIT stays.
  Gated pruned = gate_for_any_timing(x.p, x.s, r.timeline, std::chrono::steady_clock::time_point::max());
  EXPECT_EQ(pruned.waits_added, 1);
  EXPECT_EQ(pruned.reload_gates_added, 0);
  EXPECT_EQ(pruned.schedule.devices[0].reloads[0].after, x.s.devices[0].reloads[0].after);
  EXPECT_TRUE(fits_any_timing(x.p, simulate(x.p, pruned.schedule).timeline));
}

// Mean-one lognormal factors with a wide spread: timings far from the nominal ones.
std::vector<double> wild_factors(const Problem& p, std::mt19937& rng) {
  std::lognormal_distribution<double> f(-0.5, 1.0);
  std::vector<double> out(num_op_ids(p));
  for (double& x : out) x = f(rng);
  return out;
}

bool shares_a_link(const Problem& p) {
  for (int d = 1; d < p.num_devices; d++)
    if (p.devices[d].host_link == p.devices[0].host_link) return true;
  return false;
}

// Soundness: no timing ever passes the worst case, gated or not. Gating (with its reload gates
// pruned on odd trials): afterwards each device's worst case is within its budget or its nominal
// peak, and the nominal timeline has not moved.
TEST(Property, NoTimingPassesTheWorstCaseAndGatingBoundsIt) {
  std::mt19937 rng(20261201);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  int schedules = 0, unsafe = 0, made_safe = 0;
  for (int trial = 0; trial < 40; trial++) {
    const Problem base = random_problem(rng);
    for (const Family& fam : families()) {
      Result<FamilySchedule> fs = build_family(fam, base);
      if (!fs.ok()) continue;
      Problem p = fs.value.problem;
      const Schedule s = add_offloads(p, fs.value.schedule, 1 + pick(3));
      SimResult nominal = simulate(p, s);
      ASSERT_TRUE(nominal.ok()) << nominal.status.message;
      // Budgets from just under to a little over the nominal peak.
      for (int d = 0; d < p.num_devices; d++) {
        const DeviceFigures& f = nominal.timeline.devices[d];
        p.devices[d].mem_budget_bytes = f.peak_bytes - (f.peak_bytes - p.devices[d].static_bytes) / 20 +
                                        pick(1 + static_cast<int>((f.worst_peak_bytes - f.peak_bytes) / 8 + 1));
      }
      const std::string what = std::string(fam.name) + " trial " + std::to_string(trial);
      Gated g = gate_for_any_timing(p, s, nominal.timeline,
                                    trial % 2 ? std::chrono::steady_clock::time_point::max()
                                              : std::chrono::steady_clock::time_point{});
      Validation v = validate(p, g.schedule, {.check_memory_budget = false});
      ASSERT_TRUE(v.ok()) << what << ": " << v.summary();
      const Timeline& gated = v.sim.timeline;
      if (!shares_a_link(p)) {
        EXPECT_EQ(gated.makespan_us, nominal.timeline.makespan_us) << what;
      }
      for (int d = 0; d < p.num_devices; d++) {
        const int64_t bound = std::max(p.devices[d].mem_budget_bytes, nominal.timeline.devices[d].peak_bytes);
        EXPECT_LE(gated.devices[d].worst_peak_bytes, bound) << what << " device " << d;
        EXPECT_GE(gated.devices[d].worst_peak_bytes, gated.devices[d].peak_bytes) << what << " device " << d;
      }
      unsafe += fits_budget(p, nominal.timeline) && !fits_any_timing(p, nominal.timeline);
      made_safe +=
          fits_budget(p, nominal.timeline) && !fits_any_timing(p, nominal.timeline) && fits_any_timing(p, gated);
      for (const Schedule* each : {&s, static_cast<const Schedule*>(&g.schedule)}) {
        SimResult w = simulate(p, *each);
        const bool safe = fits_any_timing(p, w.timeline);
        for (int k = 0; k < 50; k++) {
          const std::vector<double> factors = wild_factors(p, rng);
          SimResult r = simulate(p, *each, {.op_times = false, .any_timing = false, .duration_factors = &factors});
          ASSERT_TRUE(r.ok()) << what << ": " << r.status.message;
          for (int d = 0; d < p.num_devices; d++) {
            ASSERT_LE(r.timeline.devices[d].peak_bytes, w.timeline.devices[d].worst_peak_bytes)
                << what << " device " << d;
            if (safe) {
              ASSERT_LE(r.timeline.devices[d].peak_bytes, p.devices[d].mem_budget_bytes) << what;
            }
          }
        }
      }
      schedules++;
    }
  }
  EXPECT_GT(schedules, 250);
  EXPECT_GT(unsafe, 20);         // the offload pass alone often counts on timing
  EXPECT_EQ(made_safe, unsafe);  // and gating always mends that
}

// The schedule behind issue 24's wrong "infeasible": reloads anchored at, and waiting for, WAITs
// that gate 3 moves up. Those reloads once moved up with them, the nominal peak rose past the
// budget, and the optimizer reported a fitting answer as infeasible.
TEST(AnyTiming, GatingKeepsReloadsAnchoredAtAWaitItMovesUp) {
  Result<std::string> text = read_text_file(std::string(OPTPIPE_TEST_DATA) + "/gate_moved_wait.json");
  ASSERT_TRUE(text.ok()) << text.status.message;
  const nlohmann::json j = nlohmann::json::parse(text.value);
  Result<Problem> p = problem_from_json(j["problem"].dump());
  Result<Schedule> s = schedule_from_json(j["schedule"].dump());
  ASSERT_TRUE(p.ok() && s.ok());
  SimResult nominal = simulate(p.value, s.value);
  ASSERT_TRUE(nominal.ok() && fits_budget(p.value, nominal.timeline));
  ASSERT_FALSE(fits_any_timing(p.value, nominal.timeline));
  Gated g = gate_for_any_timing(p.value, s.value, nominal.timeline);
  SimResult gated = simulate(p.value, g.schedule);
  ASSERT_TRUE(gated.ok()) << gated.status.message;
  EXPECT_GT(g.waits_added, 0);
  EXPECT_TRUE(fits_any_timing(p.value, gated.timeline));
  for (int d = 0; d < p.value.num_devices; d++)
    EXPECT_EQ(gated.timeline.devices[d].peak_bytes, nominal.timeline.devices[d].peak_bytes) << "device " << d;
  EXPECT_EQ(gated.timeline.makespan_us, nominal.timeline.makespan_us);
}

// The optimizer's answers under budgets that need offloads or recomputes: each fits under any
// timing, and no timing makes it overflow.
TEST(Property, OptimizedSchedulesNeverOverflow) {
  std::mt19937 rng(20261202);
  int fitted = 0, offloading = 0;
  for (int trial = 0; trial < 16; trial++) {
    Problem p = random_problem(rng);
    p.host_link = {200, 200, 1};  // fast enough for offloads to pay
    SimResult gpipe = simulate(p, build_family(*find_family("gpipe"), p).value.schedule);
    for (int d = 0; d < p.num_devices; d++) {
      const int64_t acts = gpipe.timeline.devices[d].peak_bytes - p.devices[d].static_bytes;
      p.devices[d].mem_budget_bytes = p.devices[d].static_bytes + acts / 3 + 20000;
    }
    OptimizeOptions o;
    o.time_limit_s = 600;
    o.max_evaluations = 400;
    o.seed = static_cast<uint64_t>(trial);
    OptimizeResult r = optimize(p, o);
    ASSERT_TRUE(r.status.ok()) << r.status.message;
    if (r.outcome == Outcome::kInfeasible) continue;
    const std::string what = "trial " + std::to_string(trial);
    ASSERT_TRUE(fits_any_timing(r.problem, r.timeline)) << what;
    for (const DeviceSchedule& ds : r.schedule.devices) offloading += !ds.offloads.empty();
    for (int k = 0; k < 50; k++) {
      const std::vector<double> factors = wild_factors(r.problem, rng);
      SimResult w =
          simulate(r.problem, r.schedule, {.op_times = false, .any_timing = false, .duration_factors = &factors});
      ASSERT_TRUE(w.ok()) << what << ": " << w.status.message;
      for (int d = 0; d < r.problem.num_devices; d++)
        ASSERT_LE(w.timeline.devices[d].peak_bytes, r.problem.devices[d].mem_budget_bytes) << what << " device " << d;
    }
    fitted++;
  }
  EXPECT_GT(fitted, 8);
  EXPECT_GT(offloading, 4);
}

// With room to spare, the runtime's rule changes nothing; under a budget that binds, it keeps
// every device within it, or reports the run stuck.
TEST(GatedSimulator, SameAsPlainWhenNothingWouldOverflow) {
  std::mt19937 rng(7);
  int compared = 0, bound = 0;
  for (int trial = 0; trial < 30; trial++) {
    const Problem base = random_problem(rng);
    for (const Family& fam : families()) {
      Result<FamilySchedule> fs = build_family(fam, base);
      if (!fs.ok()) continue;
      Problem p = fs.value.problem;
      const Schedule s = add_offloads(p, fs.value.schedule, 2);
      const std::vector<double> factors = wild_factors(p, rng);
      SimResult plain = simulate(p, s, {.duration_factors = &factors});
      SimResult gated = simulate(p, s, {.duration_factors = &factors, .gate_memory = true});
      ASSERT_TRUE(plain.ok() && gated.ok()) << fam.name << ": " << gated.status.message;
      EXPECT_EQ(gated.timeline.start_us.size(), plain.timeline.start_us.size());
      for (size_t i = 0; i < plain.timeline.start_us.size(); i++) {
        if (!std::isnan(plain.timeline.start_us[i])) {
          ASSERT_EQ(gated.timeline.start_us[i], plain.timeline.start_us[i]) << fam.name;
        }
      }
      EXPECT_EQ(gated.timeline.makespan_us, plain.timeline.makespan_us);
      compared++;

      // Budgets just under the plain peaks: the gate binds somewhere.
      for (int d = 0; d < p.num_devices; d++) p.devices[d].mem_budget_bytes = plain.timeline.devices[d].peak_bytes - 1;
      SimResult held = simulate(p, s, {.duration_factors = &factors, .gate_memory = true});
      if (held.ok()) {
        for (int d = 0; d < p.num_devices; d++)
          EXPECT_LE(held.timeline.devices[d].peak_bytes, p.devices[d].mem_budget_bytes) << fam.name;
        bound++;
      } else {
        EXPECT_TRUE(held.out_of_memory) << held.status.message;
        EXPECT_NE(held.status.message.find("stuck"), std::string::npos) << held.status.message;
      }
    }
  }
  EXPECT_GT(compared, 150);
  EXPECT_GT(bound, 0);
}

TEST(Noise, SameSamplesForEverySchedule) {
  const Problem p = default_problem();
  NoiseSpec spec{.jitter_sigma = 0.1, .profile_sigma = 0, .samples = 3, .seed = 9};
  NoiseSampler sampler(p, spec);
  std::vector<double> a, b, c;
  sampler.draw(1, &a);
  sampler.draw(2, &c);
  sampler.draw(1, &b);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0;
  for (double x : a) {
    ASSERT_GT(x, 0);
    sum += x;
  }
  EXPECT_NEAR(sum / static_cast<double>(a.size()), 1.0, 0.02);  // mean one
  // The profile error scales each stage's ops alike.
  NoiseSampler profiled(p, {.jitter_sigma = 0, .profile_sigma = 0.1, .seed = 9});
  profiled.draw(0, &a);
  EXPECT_EQ(a[op_id(p, Op{OpKind::kF, 1, 0})], a[op_id(p, Op{OpKind::kB, 1, 5})]);
  EXPECT_NE(a[op_id(p, Op{OpKind::kF, 1, 0})], a[op_id(p, Op{OpKind::kF, 2, 0})]);
  EXPECT_FALSE(check_noise_spec({.jitter_sigma = -1}).ok());
  EXPECT_FALSE(check_noise_spec({.samples = 0}).ok());
}

TEST(Noise, AScheduleThatCountsOnTimingOverflowsAndItsGatedTwinDoesNot) {
  OneOffload x;
  // A slow host link: the offload sometimes ends after BW0 wants to start.
  x.p.host_link = {600, 600, 0};  // offload 1.8 ms of BW0's 2 ms lead
  SimResult nominal = simulate(x.p, x.s);
  ASSERT_TRUE(fits_budget(x.p, nominal.timeline));
  const NoiseSpec spec{.jitter_sigma = 0.2, .samples = 200, .seed = 3};
  NoiseReport raw = evaluate_noise(x.p, x.s, spec).value;
  EXPECT_GT(raw.overflowed, 0);
  EXPECT_EQ(raw.stuck, 0);  // the gate waits for the offload instead
  Gated g = gate_for_any_timing(x.p, x.s, nominal.timeline);
  NoiseReport safe = evaluate_noise(x.p, g.schedule, spec).value;
  EXPECT_EQ(safe.overflowed, 0);
  EXPECT_EQ(safe.stuck, 0);
  EXPECT_LE(safe.worst_peak_bytes[0], x.p.devices[0].mem_budget_bytes);
  EXPECT_LE(safe.p50_makespan_us, safe.p95_makespan_us);
  // The same samples: where nothing overflowed the raw schedule ran exactly as the gated one.
  EXPECT_NEAR(safe.mean_makespan_us, raw.mean_makespan_us, 0.05 * raw.mean_makespan_us);
}

}  // namespace
