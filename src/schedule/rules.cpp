// Checking a schedule against the rules a runtime imposes.
#include <algorithm>

#include "optpipe/schedule_rules.h"

namespace optpipe {

bool ScheduleRules::allows_placement(Placement placement, int chunks) const {
  if (!placements.empty() && std::find(placements.begin(), placements.end(), placement) == placements.end())
    return false;
  return chunk_counts.empty() || std::find(chunk_counts.begin(), chunk_counts.end(), chunks) != chunk_counts.end();
}

bool ScheduleRules::any() const {
  return !placements.empty() || !chunk_counts.empty() || !offload || !recompute || whole_stage_recompute ||
         fixed_partition;
}

std::string ScheduleRules::describe() const {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  if (!placements.empty()) {
    std::string names;
    for (Placement p : placements) {
      if (!names.empty()) names += '|';
      names += placement_name(p);
    }
    add("placement " + names);
  }
  if (!chunk_counts.empty()) {
    std::string counts;
    for (int v : chunk_counts) counts += (counts.empty() ? "" : "|") + std::to_string(v);
    add(counts + " chunks per device");
  }
  if (!offload) add("no offload");
  if (!recompute) add("no recompute");
  if (recompute && whole_stage_recompute) add("whole-stage recompute");
  if (fixed_partition) add("partition fixed");
  return out;
}

Status check_rules_options(const ScheduleRules& rules) {
  for (int v : rules.chunk_counts)
    if (v < 1 || v > 64) return Status::Invalid("chunks per device: must be in [1, 64], got " + std::to_string(v));
  if (!rules.chunk_counts.empty() && !rules.placements.empty()) {
    bool some = false;
    for (Placement p : rules.placements)
      for (int v : rules.chunk_counts)
        some = some || ((p == Placement::kInterleaved || p == Placement::kWave) && v >= 2) ||
               (p == Placement::kVShape && v == 2) || (p == Placement::kLinear && v == 1);
    if (!some)
      return Status::Invalid(
          "chunks per device: no placement asked for takes that many (linear has 1, V-shape 2, "
          "interleaved and wave 2 or more)");
  }
  if (rules.whole_stage_recompute && !rules.recompute)
    return Status::Invalid("whole-stage recompute and no recompute do not go together");
  return Status::Ok();
}

Status check_rules(const ScheduleRules& rules, const Problem& p, const Schedule& s) {
  if (!rules.allows_placement(s.placement, s.chunks_per_device))
    return Status::Invalid(std::string("placement ") + placement_name(s.placement) + " v" +
                           std::to_string(s.chunks_per_device) + " is not allowed");
  for (int st = 0; st < p.num_stages() && !rules.recompute; st++)
    if (p.stages[st].recompute_layers > 0)
      return Status::Invalid("stage " + std::to_string(st) + " recomputes " +
                             std::to_string(p.stages[st].recompute_layers) + " layers: recomputes are not allowed");
  const int M = p.num_microbatches;
  for (size_t d = 0; d < s.devices.size(); d++) {
    const DeviceSchedule& ds = s.devices[d];
    const std::string where = "device " + std::to_string(d) + ": ";
    if (!rules.offload && !ds.offloads.empty())
      return Status::Invalid(where + op_name(ds.offloads[0]) + ": offloads are not allowed");
    std::vector<int> recomputed_per_stage(p.num_stages(), 0);
    for (const Op& op : ds.compute) {
      if (op.kind != OpKind::kR) continue;
      if (!rules.recompute) return Status::Invalid(where + op_name(op) + ": recomputes are not allowed");
      if (op.stage >= 0 && op.stage < p.num_stages()) recomputed_per_stage[op.stage]++;
    }
    for (int st = 0; st < p.num_stages() && rules.whole_stage_recompute; st++)
      if (recomputed_per_stage[st] > 0 && recomputed_per_stage[st] < M)
        return Status::Invalid(where + "stage " + std::to_string(st) + " recomputes " +
                               std::to_string(recomputed_per_stage[st]) + " of " + std::to_string(M) +
                               " microbatches: only whole-stage recompute is allowed");
  }
  return Status::Ok();
}

}  // namespace optpipe
