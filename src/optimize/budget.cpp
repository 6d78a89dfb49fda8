// What budgets admit an answer: the budget minimums over the space, the static-memory checks, and
// what would help when nothing fits.
#include "optimize/budget.h"

#include <algorithm>
#include <limits>

#include "optimize/frugal.h"
#include "optpipe/optimize.h"
#include "optpipe/units.h"

namespace optpipe {

// Per device, the least budget any schedule of the space needs: budget_lower_bound's on each
// placement's cut, the least over them; with the partition free, what every partition needs (a
// device holds an item at least: the least item's static bytes and forward).
std::vector<int64_t> space_budget_lower_bound(const Problem& p, const std::vector<PlacementCandidate>& space,
                                              bool partition_free) {
  std::vector<int64_t> out = budget_lower_bound(p);
  for (const PlacementCandidate& c : space) {
    const std::vector<int64_t> b = budget_lower_bound(c.problem);
    for (int d = 0; d < p.num_devices; d++) out[d] = std::min(out[d], b[d]);
  }
  if (!partition_free) return out;
  int64_t least_static = std::numeric_limits<int64_t>::max(), least_forward = least_static;
  for (const LayerSpec& l : p.layers) {
    least_static = std::min(least_static, l.static_bytes);
    least_forward = std::min(least_forward, l.act_f_bytes);
  }
  for (int64_t& b : out) b = std::min(b, least_static + least_forward);
  return out;
}

// The least budget, the same on every device, that any schedule of the space fits: the largest of
// the per-device minimums; with the partition free also what the devices need together — one of
// them holds at least a 1/D share of the model's static bytes, and the device holding an item
// holds it whole, each with the activation of a forward of its own at least.
int64_t uniform_budget_lower_bound(const Problem& p, const std::vector<int64_t>& per_device, bool partition_free) {
  int64_t out = *std::max_element(per_device.begin(), per_device.end());
  if (!partition_free) return out;
  int64_t total_static = 0, least_forward = std::numeric_limits<int64_t>::max();
  for (const LayerSpec& l : p.layers) {
    total_static += l.static_bytes;
    least_forward = std::min(least_forward, l.act_f_bytes);
    out = std::max(out, l.static_bytes + l.act_f_bytes);
  }
  return std::max(out, (total_static + p.num_devices - 1) / p.num_devices + least_forward);
}

// Whether some frugal schedule on `rules`' space fits p's budget on every device.
bool frugal_fits(const Problem& p, const ScheduleRules& rules) {
  const std::vector<Frugal> frugal = frugal_schedules(placement_space(p, rules), rules);
  const Frugal* lean = leanest(frugal, p);
  if (!lean) return false;
  for (int d = 0; d < p.num_devices; d++)
    if (lean->need_bytes[d] > lean->built.problem.devices[d].mem_budget_bytes) return false;
  return true;
}

// The rules lifted one at a time, each named where its frugal schedule then fits (an answer is
// then certain).
std::vector<std::string> what_would_help(const Problem& p, const ScheduleRules& rules) {
  std::vector<std::string> out;
  auto lifted = [&](const char* what, auto&& lift) {
    ScheduleRules r = rules;
    lift(r);
    if (frugal_fits(p, r)) out.push_back(what);
  };
  if (!rules.offload) lifted("offloading allowed (without --no-offload)", [](ScheduleRules& r) { r.offload = true; });
  if (!rules.recompute)
    lifted("recompute allowed (without --no-recompute)", [](ScheduleRules& r) { r.recompute = true; });
  if (!rules.placements.empty() || !rules.chunk_counts.empty())
    lifted("another placement or chunk count (without --placement/--chunks)", [](ScheduleRules& r) {
      r.placements.clear();
      r.chunk_counts.clear();
    });
  return out;
}

Status check_static_memory(const Problem& p) {
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceSpec& dev = p.devices[d];
    if (dev.static_bytes > dev.mem_budget_bytes)
      return Status::Infeasible(
          "no schedule can fit: device " + std::to_string(d) +
          "'s static memory alone (parameters, gradients, "
          "optimizer state) is " +
          format_bytes(dev.static_bytes) + ", above its budget of " + format_bytes(dev.mem_budget_bytes) +
          "; more pipeline stages, tensor parallelism, a distributed optimizer or a larger budget would help");
  }
  return Status::Ok();
}

Status static_memory_status(const Problem& p, const ScheduleRules& rules) {
  if (!rules.fixed_partition && layers_match(p)) {  // static memory moves with the layers
    double total = 0, room = 0;
    for (const LayerSpec& l : p.layers) total += static_cast<double>(l.static_bytes);
    for (const DeviceSpec& d : p.devices) room += static_cast<double>(d.mem_budget_bytes);
    if (total <= room) return Status::Ok();
    return Status::Infeasible(
        "no schedule can fit: the model's static memory (parameters, gradients, optimizer state) is " +
        format_bytes(static_cast<int64_t>(total)) + ", above the devices' budgets together, " +
        format_bytes(static_cast<int64_t>(room)) +
        ", whatever the partition; tensor parallelism, a distributed optimizer, more devices or a larger budget "
        "would help");
  }
  Status own = check_static_memory(p);
  if (own.ok()) return own;
  for (const PlacementCandidate& c : placement_space(p, rules))
    if (check_static_memory(c.problem).ok()) return Status::Ok();
  return own;
}

}  // namespace optpipe
