#include "suite_instances.h"

#include <random>

#include "optpipe/cost_model.h"
#include "optpipe/families.h"
#include "optpipe/simulate.h"

namespace optpipe {

using json = nlohmann::json;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

}  // namespace

Result<Problem> synthetic(const json& spec) {
  UniformSpec u;
  u.num_devices = spec.at("devices").get<int>();
  u.num_microbatches = spec.at("microbatches").get<int>();
  u.t_f_us = u.t_b_us = u.t_w_us = 40000;
  u.t_comm_us = spec.value("t_comm_us", 0.0);
  u.act_f_bytes = GiB;
  u.act_w_bytes = -GiB / 4;
  u.act_input_bytes = 32ll << 20;
  u.static_bytes = 20 * GiB;
  u.num_layers = 4;  // a synthetic stage is four layers: the space holds up to 4 chunks a device
  Problem p = make_uniform_problem(u);
  if (spec.at("costs") == "hetero") {
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(spec.at("name").get<std::string>()) & 0xffffffff));
    std::uniform_real_distribution<double> spread(0.8, 1.2), b(1.0, 1.4), w(0.6, 1.0);
    for (int s = 0; s < p.num_stages(); s++) {
      StageSpec& st = p.stages[s];
      const double scale = (s == 0 ? 1.2 : 1.0) * (s == p.num_stages() - 1 ? 1.5 : 1.0);
      st.t_f_us = st.t_r_us = 40000 * spread(rng) * scale;
      st.t_b_us = st.t_f_us * b(rng);
      st.t_w_us = st.t_f_us * w(rng);
    }
  }
  const double gbps = spec.value("link", std::string("ample")) == "scarce" ? 12 : 50;
  p.host_link = {gbps, gbps, 10};
  if (spec.value("shared_host_link", false))
    for (int d = 0; d < p.num_devices; d++) p.devices[d].host_link = d / 2;
  Status st = check_problem(p);
  if (!st.ok()) return Result<Problem>::Error(st);
  return Result<Problem>::Of(std::move(p));
}

Result<Problem> from_preset(const json& spec) {
  Result<ModelSpec> m = find_model(spec.at("model").get<std::string>());
  if (!m.ok()) return Result<Problem>::Error(m.status);
  Result<ClusterSpec> c = find_cluster(spec.at("cluster").get<std::string>());
  if (!c.ok()) return Result<Problem>::Error(c.status);
  PlanSpec plan;
  plan.num_microbatches = spec.value("microbatches", 0);
  return build_problem(m.value, c.value, plan);
}

std::vector<int64_t> family_peak_bytes(const Problem& p, const char* family) {
  Result<FamilySchedule> fs = build_family(*find_family(family), p);
  OPTPIPE_CHECK(fs.ok(), fs.status.message);
  SimResult r = simulate(fs.value.problem, fs.value.schedule, {.op_times = false});
  OPTPIPE_CHECK(r.ok(), r.status.message);
  std::vector<int64_t> out;
  for (const DeviceFigures& d : r.timeline.devices) out.push_back(d.peak_bytes);
  return out;
}

// The peak activation bytes over devices of the family the budget is named after.
Status set_budget(const std::string& kind, Problem* p) {
  if (kind == "hbm") return Status::Ok();
  auto activation_peak = [&](const char* family) -> int64_t {
    const std::vector<int64_t> peaks = family_peak_bytes(*p, family);
    int64_t peak = 0;
    for (int d = 0; d < p->num_devices; d++) peak = std::max(peak, peaks[d] - p->devices[d].static_bytes);
    return peak;
  };
  int64_t activations;
  if (kind == "tight")
    activations = activation_peak("1f1b") / 2;
  else if (kind == "1f1b")
    activations = activation_peak("1f1b");
  else if (kind == "rich")
    activations = activation_peak("zb-h2");
  else
    return Status::Invalid("unknown budget \"" + kind + "\"");
  for (DeviceSpec& d : p->devices) d.mem_budget_bytes = d.static_bytes + activations;
  return Status::Ok();
}

}  // namespace optpipe
