// Hand-worked simulations: every expected number below is derived in the comment beside it.
#include <gtest/gtest.h>

#include "optpipe/simulate.h"

using namespace optpipe;

namespace {

Problem tiny(int devices, int microbatches, double t_comm_us = 0) {
  UniformSpec u;
  u.num_devices = devices;
  u.num_microbatches = microbatches;
  u.t_f_us = 10;
  u.t_b_us = 20;
  u.t_w_us = 5;
  u.t_comm_us = t_comm_us;
  u.act_f_bytes = 1000;
  u.act_w_bytes = -300;  // act_b_bytes = −700
  u.act_input_bytes = 100;
  u.static_bytes = 5000;
  return make_uniform_problem(u);
}

Op op(OpKind k, int s, int i) { return Op{k, s, i}; }

Schedule schedule_for(const Problem& p) {
  Schedule s;
  s.placement = p.placement;
  s.chunks_per_device = p.chunks_per_device;
  s.devices.resize(p.num_devices);
  return s;
}

}  // namespace

TEST(Simulate, OneDeviceSplitBackward) {
  Problem p = tiny(1, 1);
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kB, 0, 0), op(OpKind::kW, 0, 0)};
  SimResult r = simulate(p, s, {.memory_curve = true});
  ASSERT_TRUE(r.ok()) << r.status.message;
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 35);  // 10 + 20 + 5
  EXPECT_DOUBLE_EQ(r.timeline.bubble_ratio, 0);
  EXPECT_EQ(r.timeline.devices[0].peak_bytes, 6000);  // static 5000 + F's 1000
  // Curve: 5000 → 6000 at F start → 5300 when B ends (30) → 5000 when W ends (35).
  const auto& m = r.timeline.memory[0];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1].bytes, 6000);
  EXPECT_DOUBLE_EQ(m[2].time_us, 30);
  EXPECT_EQ(m[2].bytes, 5300);
  EXPECT_EQ(m[3].bytes, 5000);
}

TEST(Simulate, CommunicationLatencyBetweenDevices) {
  Problem p = tiny(2, 1, /*t_comm_us=*/3);
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kBW, 0, 0)};
  s.devices[1].compute = {op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0)};
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  // F0 [0,10]; hop 3; F1 [13,23]; BW1 [23,48]; hop 3; BW0 [51,76].
  const int bw0 = op_id(p, op(OpKind::kBW, 0, 0));
  EXPECT_DOUBLE_EQ(r.timeline.start_us[bw0], 51);
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 76);
  EXPECT_DOUBLE_EQ(r.timeline.devices[1].first_start_us, 13);
  EXPECT_DOUBLE_EQ(r.timeline.max_span_us, 76);
  EXPECT_NEAR(r.timeline.bubble_ratio, 1 - 70.0 / (2 * 76), 1e-12);
}

TEST(Simulate, OffloadAndReloadMoveMemoryAndTime) {
  Problem p = tiny(1, 2);
  p.host_link = {/*d2h*/ 0.1, /*h2d*/ 0.1, /*latency*/ 2};  // 1000 bytes at 100 bytes/us: 10 + 2 us
  Schedule s = schedule_for(p);
  // F0 F1 B1 W1 B0 W0 with F0's activation offloaded and reloaded when B1 starts.
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kB, 0, 1),
                          op(OpKind::kW, 0, 1), op(OpKind::kB, 0, 0), op(OpKind::kW, 0, 0)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0)};
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kB, 0, 1)}};
  SimResult r = simulate(p, s, {.memory_curve = true});
  ASSERT_TRUE(r.ok()) << r.status.message;
  // F0 [0,10], F1 [10,20], offload [10,22], B1 [20,40]; the reload is released when B1 starts
  // (20) but needs the offload done: [22,34]. W1 [40,45], B0 [45,65], W0 [65,70].
  auto at = [&](OpKind k, int i) { return r.timeline.start_us[op_id(p, op(k, 0, i))]; };
  EXPECT_DOUBLE_EQ(at(OpKind::kOffload, 0), 10);
  EXPECT_DOUBLE_EQ(at(OpKind::kReload, 0), 22);  // needs the offload finished: 10 + 12
  EXPECT_DOUBLE_EQ(at(OpKind::kB, 0), 45);
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 70);
  // Peak: both activations alive from 10 (F1 start) to 22 (offload end): 5000 + 2000.
  EXPECT_EQ(r.timeline.devices[0].peak_bytes, 7000);
  EXPECT_EQ(r.timeline.devices[0].offload_bytes, 1000);
  EXPECT_EQ(r.timeline.devices[0].reload_bytes, 1000);
  EXPECT_EQ(r.timeline.memory[0].back().bytes, 5000);  // everything freed
}

TEST(Simulate, WaitHoldsTheStreamUntilTheOffloadHasFreedItsBytes) {
  Problem p = tiny(1, 2);
  p.host_link = {/*d2h*/ 0.1, /*h2d*/ 0.1, /*latency*/ 2};  // 12 us transfers, as above
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kWait, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kB, 0, 1),
                          op(OpKind::kW, 0, 1), op(OpKind::kB, 0, 0),    op(OpKind::kW, 0, 0)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0)};
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kW, 0, 1)}};
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  // F0 [0,10], offload [10,22], the wait ends at 22, F1 [22,32], B1 [32,52], W1 [52,57], the
  // reload [52,64], B0 [64,84], W0 [84,89].
  auto at = [&](OpKind k, int i) { return r.timeline.start_us[op_id(p, op(k, 0, i))]; };
  EXPECT_DOUBLE_EQ(at(OpKind::kWait, 0), 22);
  EXPECT_DOUBLE_EQ(r.timeline.end_us[op_id(p, op(OpKind::kWait, 0, 0))], 22);
  EXPECT_DOUBLE_EQ(at(OpKind::kF, 1), 22);
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 89);
  // F0's 1000 bytes leave at 22 as F1's arrive; at 52 B1 has freed 700 of F1's, the reload
  // brings 1000: 5000 + 300 + 1000. Without the wait, 7000 at F1's start.
  EXPECT_EQ(r.timeline.devices[0].peak_bytes, 6300);
  EXPECT_DOUBLE_EQ(r.timeline.devices[0].busy_us, 70);  // a wait is not busy
}

TEST(Simulate, ReloadWaitsForTheOffloadNamedAfter) {
  Problem p = tiny(1, 2);
  p.host_link = {/*d2h*/ 0.1, /*h2d*/ 0.1, /*latency*/ 2};  // 12 us transfers
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kB, 0, 1),
                          op(OpKind::kW, 0, 1), op(OpKind::kB, 0, 0), op(OpKind::kW, 0, 0)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0), op(OpKind::kOffload, 0, 1)};
  // Offloads [10,22] and [22,34]. Reload 0 anchored at F1 (10) is free to go at 22, its own
  // offload's end; told to wait for offload 1, at 34.
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kF, 0, 1)},
                          {op(OpKind::kReload, 0, 1), op(OpKind::kF, 0, 1)}};
  SimResult free = simulate(p, s);
  ASSERT_TRUE(free.ok()) << free.status.message;
  EXPECT_DOUBLE_EQ(free.timeline.start_us[op_id(p, op(OpKind::kReload, 0, 0))], 22);
  s.devices[0].reloads[0].after = {op(OpKind::kOffload, 0, 1)};
  SimResult held = simulate(p, s);
  ASSERT_TRUE(held.ok()) << held.status.message;
  EXPECT_DOUBLE_EQ(held.timeline.start_us[op_id(p, op(OpKind::kReload, 0, 0))], 34);
  EXPECT_DOUBLE_EQ(held.timeline.start_us[op_id(p, op(OpKind::kReload, 0, 1))], 46);  // the channel's next
}

TEST(Simulate, ReloadWaitsForItsAnchor) {
  Problem p = tiny(1, 2);
  p.host_link = {1000, 1000, 1};  // ~2 us transfers
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kB, 0, 1),
                          op(OpKind::kW, 0, 1), op(OpKind::kB, 0, 0), op(OpKind::kW, 0, 0)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0)};
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kW, 0, 1)}};  // W1 starts at 40
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  EXPECT_DOUBLE_EQ(r.timeline.start_us[op_id(p, op(OpKind::kReload, 0, 0))], 40);
  EXPECT_DOUBLE_EQ(r.timeline.start_us[op_id(p, op(OpKind::kB, 0, 0))], 45);  // reload ends at 42 < W1's end
}

TEST(Simulate, SharedHostLinkServesFirstComeFirstServed) {
  Problem p = tiny(2, 1);
  p.host_link = {0.1, 0.1, 0};  // each transfer 10 us
  p.devices[1].host_link = 0;   // both devices on link 0
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kBW, 0, 0)};
  s.devices[1].compute = {op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0)};
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kF, 0, 0)}};
  s.devices[1].offloads = {op(OpKind::kOffload, 1, 0)};
  s.devices[1].reloads = {{op(OpKind::kReload, 1, 0), op(OpKind::kF, 1, 0)}};
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  auto start = [&](OpKind k, int st) { return r.timeline.start_us[op_id(p, op(k, st, 0))]; };
  // Offload 0 ready at 10 → [10,20]; offload 1 ready at 20 (F1 is [10,20]) → [20,30].
  EXPECT_DOUBLE_EQ(start(OpKind::kOffload, 0), 10);
  EXPECT_DOUBLE_EQ(start(OpKind::kOffload, 1), 20);
  // Reload 0 ready at 20 → [20,30] on the h2d channel; reload 1 ready at 30 → [30,40].
  EXPECT_DOUBLE_EQ(start(OpKind::kReload, 0), 20);
  EXPECT_DOUBLE_EQ(start(OpKind::kReload, 1), 30);
}

TEST(Simulate, SharedLinkQueuesTheLaterTransfer) {
  Problem p = tiny(2, 2);
  p.host_link = {0.1, 0.1, 0};  // 10 us per transfer
  p.devices[1].host_link = 0;
  p.stages[1].t_f_us = 1;  // device 1's forward ends soon after device 0's
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kBW, 0, 0), op(OpKind::kBW, 0, 1)};
  s.devices[1].compute = {op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0), op(OpKind::kF, 1, 1), op(OpKind::kBW, 1, 1)};
  s.devices[0].offloads = {op(OpKind::kOffload, 0, 0)};
  s.devices[0].reloads = {{op(OpKind::kReload, 0, 0), op(OpKind::kF, 0, 1)}};
  s.devices[1].offloads = {op(OpKind::kOffload, 1, 0)};
  s.devices[1].reloads = {{op(OpKind::kReload, 1, 0), op(OpKind::kF, 1, 0)}};
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok()) << r.status.message;
  // Offload(0) ready at 10 → [10,20]. F(1,0) is [10,11], so Offload(1) is ready at 11 but the
  // shared channel is busy until 20 → [20,30].
  EXPECT_DOUBLE_EQ(r.timeline.start_us[op_id(p, op(OpKind::kOffload, 1, 0))], 20);
  p.devices[1].host_link = 1;
  SimResult sep = simulate(p, s);
  ASSERT_TRUE(sep.ok());
  EXPECT_DOUBLE_EQ(sep.timeline.start_us[op_id(p, op(OpKind::kOffload, 1, 0))], 11);
}

TEST(Simulate, RecomputeKeepsOnlyTheInput) {
  Problem p = tiny(1, 2);
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0),  op(OpKind::kF, 0, 1), op(OpKind::kR, 0, 0),
                          op(OpKind::kBW, 0, 0), op(OpKind::kR, 0, 1), op(OpKind::kBW, 0, 1)};
  SimResult r = simulate(p, s, {.memory_curve = true});
  ASSERT_TRUE(r.ok()) << r.status.message;
  // F0 keeps 1000 while running, then only its 100-byte input; F1 peaks at 5000+100+1000.
  // R0 brings F0 back: 5000 + 100 (F1's input) + 1000 = 6100 again.
  EXPECT_EQ(r.timeline.devices[0].peak_bytes, 6100);
  EXPECT_EQ(r.timeline.devices[0].num_recomputes, 2);
  EXPECT_DOUBLE_EQ(r.timeline.makespan_us, 10 + 10 + 2 * (10 + 25));
  EXPECT_EQ(r.timeline.memory[0].back().bytes, 5000);
}

TEST(Simulate, WorkspaceCountsOnlyWhileRunning) {
  Problem p = tiny(1, 1);
  p.stages[0].ws_b_bytes = 4000;
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kB, 0, 0), op(OpKind::kW, 0, 0)};
  SimResult r = simulate(p, s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.timeline.devices[0].peak_bytes, 10000);  // 5000 + 1000 + 4000 during B
  EXPECT_EQ(r.timeline.devices[0].peak_op, op(OpKind::kB, 0, 0));
}

TEST(Simulate, DeadlockIsReportedNotHung) {
  Problem p = tiny(2, 2);
  Schedule s = schedule_for(p);
  // Device 1 wants microbatch 1 first; device 0 only sends it after the backward of microbatch 0.
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kBW, 0, 0), op(OpKind::kF, 0, 1), op(OpKind::kBW, 0, 1)};
  s.devices[1].compute = {op(OpKind::kF, 1, 1), op(OpKind::kBW, 1, 1), op(OpKind::kF, 1, 0), op(OpKind::kBW, 1, 0)};
  SimResult r = simulate(p, s);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.stuck.size(), 2u);
  EXPECT_NE(r.status.message.find("deadlock"), std::string::npos);
  EXPECT_NE(r.status.message.find("F1 s1"), std::string::npos) << r.status.message;
}

TEST(Simulate, RejectsOpsTwiceOrElsewhere) {
  Problem p = tiny(2, 1);
  Schedule s = schedule_for(p);
  s.devices[0].compute = {op(OpKind::kF, 0, 0), op(OpKind::kF, 0, 0)};
  SimResult r = simulate(p, s);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status.message.find("F0 s0 appears twice"), std::string::npos) << r.status.message;
  s.devices[0].compute = {op(OpKind::kF, 1, 0)};
  r = simulate(p, s);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status.message.find("belongs to device 1"), std::string::npos) << r.status.message;
  s.devices[0].compute = {op(OpKind::kF, 0, 7)};
  r = simulate(p, s);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status.message.find("device 0 compute: F7 s0 is not a valid op"), std::string::npos) << r.status.message;
}
