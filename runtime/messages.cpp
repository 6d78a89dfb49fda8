#include "messages.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "optpipe/simulate.h"

namespace optpipe::runtime {

namespace {

// When the op that produces a message ends: the first of `kinds` at (stage, i) the schedule has.
double end_of(const Problem& p, const Timeline& t, std::initializer_list<OpKind> kinds, int stage, int i) {
  for (OpKind k : kinds) {
    const double end = t.end_us[op_id(p, {k, stage, i})];
    if (!std::isnan(end)) return end;
  }
  OPTPIPE_CHECK(false, "a message without its producer in the schedule");
  return 0;
}

}  // namespace

std::map<int, std::vector<Message>> message_order(const Problem& p, const Schedule& s, int d) {
  SimResult sim = simulate(p, s, {.op_times = true, .any_timing = false});
  OPTPIPE_CHECK(sim.ok(), "message_order needs a valid schedule: " + sim.status.message);
  const Timeline& t = sim.timeline;
  const int S = p.num_stages();
  std::map<int, std::vector<Message>> order;
  auto add = [&](int peer, bool send, const Op& consumer, const Op& local, double time_us) {
    order[peer].push_back({peer, send, op_id(p, consumer), local, time_us});
  };
  for (const Op& op : s.devices[d].compute) {
    const int st = op.stage, i = op.microbatch;
    if (op.kind == OpKind::kF) {
      if (st + 1 < S && p.device_of(st + 1) != d)
        add(p.device_of(st + 1), true, {OpKind::kF, st + 1, i}, op, t.end_us[op_id(p, op)]);
      if (st > 0 && p.device_of(st - 1) != d)
        add(p.device_of(st - 1), false, op, op, end_of(p, t, {OpKind::kF}, st - 1, i));
    }
    if (op.kind == OpKind::kB || op.kind == OpKind::kBW) {
      if (st > 0 && p.device_of(st - 1) != d)
        add(p.device_of(st - 1), true, {OpKind::kB, st - 1, i}, op, t.end_us[op_id(p, op)]);
      if (st + 1 < S && p.device_of(st + 1) != d)
        add(p.device_of(st + 1), false, {OpKind::kB, st, i}, op, end_of(p, t, {OpKind::kB, OpKind::kBW}, st + 1, i));
    }
  }
  for (auto& [peer, msgs] : order)
    std::stable_sort(msgs.begin(), msgs.end(), [](const Message& a, const Message& b) {
      return a.time_us != b.time_us ? a.time_us < b.time_us : a.tag < b.tag;
    });
  return order;
}

}  // namespace optpipe::runtime
