#include "records.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

namespace optpipe::runtime {

using json = nlohmann::json;

double monotonic_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

std::string rank_report_to_json(const RankReport& r) {
  json its = json::array();
  for (const IterationRecord& it : r.iterations) {
    json ops = json::array(), mem = json::array();
    for (const OpRecord& o : it.ops) ops.push_back({op_name(o.op), o.start_us, o.end_us});
    for (const MemoryEvent& m : it.memory) mem.push_back({m.time_us, m.bytes});
    its.push_back({{"start_us", it.start_us},
                   {"ops", ops},
                   {"memory", mem},
                   {"peak_activation_bytes", it.peak_activation_bytes},
                   {"gate_holds", it.gate_holds},
                   {"gate_held_us", it.gate_held_us},
                   {"loss", it.loss},
                   {"allocator_peak_bytes", it.allocator_peak_bytes},
                   {"allocator_reserved_bytes", it.allocator_reserved_bytes}});
  }
  json j = {{"rank", r.rank},    {"device", r.device},   {"hops", r.hops},           {"pinned_bytes", r.pinned_bytes},
            {"iterations", its}, {"checked", r.checked}, {"profile", r.profile_json}};
  if (r.checked)
    j["check"] = {{"loss", r.check.loss},
                  {"reference_loss", r.check.reference_loss},
                  {"max_grad_rel_error", r.check.max_grad_rel_error},
                  {"worst_param", r.check.worst_param},
                  {"num_params_checked", r.check.num_params_checked}};
  return j.dump() + "\n";
}

Result<RankReport> rank_report_from_json(const std::string& text) {
  using R = Result<RankReport>;
  try {
    const json j = json::parse(text);
    RankReport r;
    r.rank = j.at("rank").get<int>();
    r.device = j.at("device").get<std::string>();
    r.hops = j.at("hops").get<std::string>();
    r.pinned_bytes = j.at("pinned_bytes").get<int64_t>();
    for (const json& it : j.at("iterations")) {
      IterationRecord rec;
      rec.start_us = it.at("start_us").get<double>();
      for (const json& o : it.at("ops")) {
        OpRecord op;
        if (!parse_op_name(o.at(0).get<std::string>(), &op.op))
          return R::Error(Status::Invalid("bad op name " + o.at(0).dump()));
        op.start_us = o.at(1).get<double>();
        op.end_us = o.at(2).get<double>();
        rec.ops.push_back(op);
      }
      for (const json& m : it.at("memory")) rec.memory.push_back({m.at(0).get<double>(), m.at(1).get<int64_t>()});
      rec.peak_activation_bytes = it.at("peak_activation_bytes").get<int64_t>();
      rec.gate_holds = it.at("gate_holds").get<int>();
      rec.gate_held_us = it.at("gate_held_us").get<double>();
      rec.loss = it.at("loss").get<double>();
      rec.allocator_peak_bytes = it.at("allocator_peak_bytes").get<int64_t>();
      rec.allocator_reserved_bytes = it.at("allocator_reserved_bytes").get<int64_t>();
      r.iterations.push_back(std::move(rec));
    }
    r.checked = j.at("checked").get<bool>();
    r.profile_json = j.at("profile").get<std::string>();
    if (r.checked) {
      const json& c = j.at("check");
      r.check.loss = c.at("loss").get<double>();
      r.check.reference_loss = c.at("reference_loss").get<double>();
      r.check.max_grad_rel_error = c.at("max_grad_rel_error").get<double>();
      r.check.worst_param = c.at("worst_param").get<std::string>();
      r.check.num_params_checked = c.at("num_params_checked").get<int>();
    }
    return R::Of(std::move(r));
  } catch (const json::exception& e) {
    return R::Error(Status::Invalid(std::string("malformed rank report: ") + e.what()));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

namespace {

// `p` with each stage's F/B/W/R times replaced by the medians measured in `iteration`; a fused
// BW is split in the problem's B : W proportion.
Problem with_measured_times(const Problem& p, const std::vector<RankReport>& ranks, int iteration) {
  const int S = p.num_stages();
  std::vector<std::vector<std::vector<double>>> d(S, std::vector<std::vector<double>>(kNumOpKinds));
  for (const RankReport& r : ranks)
    for (const OpRecord& o : r.iterations[iteration].ops)
      d[o.op.stage][static_cast<int>(o.op.kind)].push_back(o.end_us - o.start_us);
  Problem q = p;
  for (int s = 0; s < S; s++) {
    StageSpec& st = q.stages[s];
    auto measured = [&](OpKind k) -> const std::vector<double>& { return d[s][static_cast<int>(k)]; };
    if (!measured(OpKind::kF).empty()) st.t_f_us = median(measured(OpKind::kF));
    if (!measured(OpKind::kR).empty()) st.t_r_us = median(measured(OpKind::kR));
    if (!measured(OpKind::kB).empty()) st.t_b_us = median(measured(OpKind::kB));
    if (!measured(OpKind::kW).empty()) st.t_w_us = median(measured(OpKind::kW));
    if (!measured(OpKind::kBW).empty() && measured(OpKind::kB).empty()) {
      const double bw = median(measured(OpKind::kBW)),
                   share = p.stages[s].t_b_us / (p.stages[s].t_b_us + p.stages[s].t_w_us);
      st.t_b_us = bw * share;
      st.t_w_us = bw - st.t_b_us;
    }
  }
  return q;
}

}  // namespace

RunComparison compare_run(const Problem& p, const Schedule& s, const Timeline& predicted,
                          const std::vector<RankReport>& ranks) {
  const int D = p.num_devices;
  OPTPIPE_CHECK(static_cast<int>(ranks.size()) == D, "one report per rank");
  const size_t n_it = ranks[0].iterations.size();
  RunComparison c;
  c.device = ranks[0].device;
  c.hops = ranks[0].hops;
  std::vector<double> starts(n_it, std::numeric_limits<double>::infinity()), ends(n_it, 0);
  for (const RankReport& r : ranks) {
    OPTPIPE_CHECK(r.iterations.size() == n_it, "every rank runs the same iterations");
    for (size_t it = 0; it < n_it; it++) {
      starts[it] = std::min(starts[it], r.iterations[it].start_us);
      for (const OpRecord& o : r.iterations[it].ops) ends[it] = std::max(ends[it], o.end_us);
    }
  }
  for (size_t it = 0; it < n_it; it++) {
    c.iteration_us.push_back(ends[it] - starts[it]);
    c.losses.push_back(ranks[0].iterations[it].loss);
  }
  // The median iteration among those after the warm-up one.
  std::vector<int> order;
  for (size_t it = n_it > 1 ? 1 : 0; it < n_it; it++) order.push_back(static_cast<int>(it));
  std::sort(order.begin(), order.end(), [&](int a, int b) { return c.iteration_us[a] < c.iteration_us[b]; });
  c.shown_iteration = order[order.size() / 2];
  c.measured_us = c.iteration_us[c.shown_iteration];
  c.predicted_us = predicted.makespan_us;

  const double t0 = starts[c.shown_iteration];
  Timeline& t = c.measured;
  t.start_us.assign(num_op_ids(p), std::nan(""));
  t.end_us.assign(num_op_ids(p), std::nan(""));
  t.devices.assign(D, DeviceFigures{});
  t.memory.assign(D, {});
  t.makespan_us = c.measured_us;
  double total_busy = 0;
  for (int d = 0; d < D; d++) {
    const IterationRecord& rec = ranks[d].iterations[c.shown_iteration];
    DeviceFigures& f = t.devices[d];
    f.first_start_us = std::numeric_limits<double>::infinity();
    for (const OpRecord& o : rec.ops) {
      const int id = op_id(p, o.op);
      t.start_us[id] = o.start_us - t0;
      t.end_us[id] = o.end_us - t0;
      if (is_compute(o.op.kind)) {
        f.busy_us += o.end_us - o.start_us;
        f.first_start_us = std::min(f.first_start_us, o.start_us - t0);
        f.last_end_us = std::max(f.last_end_us, o.end_us - t0);
      }
    }
    f.idle_us = t.makespan_us - f.busy_us;
    total_busy += f.busy_us;
    t.max_span_us = std::max(t.max_span_us, f.last_end_us - f.first_start_us);
    const int64_t static_bytes = p.devices[d].static_bytes;
    for (const MemoryEvent& m : rec.memory) t.memory[d].push_back({m.time_us - t0, static_bytes + m.bytes});
    int64_t peak = 0;
    c.gate_holds.push_back(0);
    c.gate_held_us.push_back(0);
    c.allocator_peak_bytes.push_back(0);
    c.allocator_reserved_bytes.push_back(0);
    for (const IterationRecord& r : ranks[d].iterations) {
      peak = std::max(peak, r.peak_activation_bytes);
      c.allocator_peak_bytes.back() = std::max(c.allocator_peak_bytes.back(), r.allocator_peak_bytes);
      c.allocator_reserved_bytes.back() = std::max(c.allocator_reserved_bytes.back(), r.allocator_reserved_bytes);
      c.gate_holds.back() += r.gate_holds;
      c.gate_held_us.back() += r.gate_held_us;
    }
    f.peak_bytes = static_bytes + peak;
    c.measured_idle_us.push_back(f.idle_us);
    c.predicted_idle_us.push_back(predicted.devices[d].idle_us);
    c.measured_peak_bytes.push_back(peak);
    c.predicted_peak_bytes.push_back(predicted.devices[d].peak_bytes - static_bytes);
  }
  t.idle_us = D * t.makespan_us - total_busy;
  SimResult replay = simulate(with_measured_times(p, ranks, c.shown_iteration), s, {.op_times = false});
  c.replayed_us = replay.ok() ? replay.timeline.makespan_us : 0;
  t.bubble_ratio = t.makespan_us > 0 ? 1 - total_busy / (D * t.makespan_us) : 0;
  return c;
}

}  // namespace optpipe::runtime
