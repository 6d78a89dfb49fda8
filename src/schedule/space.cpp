// The placements searched: one list, derived from the problem and the rules.
#include "optpipe/space.h"

#include <algorithm>
#include <limits>

namespace optpipe {

int max_chunks_per_device(const Problem& p) {
  if (p.num_devices < 1) return 1;
  int most = 1;
  if (layers_match(p)) {
    most = static_cast<int>(p.layers.size()) / p.num_devices;
  } else if (!p.stages.empty()) {  // rechunk splits each stage's costs evenly: a piece a layer at most
    int least_layers = std::numeric_limits<int>::max();
    for (const StageSpec& st : p.stages) least_layers = std::min(least_layers, st.num_layers);
    most = std::max(2, least_layers * p.chunks_per_device);
  }
  return std::clamp(most, 1, 64);
}

std::vector<PlacementCandidate> placement_space(const Problem& p, const ScheduleRules& rules) {
  std::vector<std::pair<Placement, int>> wanted = {{Placement::kLinear, 1}, {Placement::kVShape, 2}};
  const int most = max_chunks_per_device(p);
  for (int v = 2; v <= most; v++) wanted.push_back({Placement::kInterleaved, v});
  const bool wave_for_v = rules.allows_placement(Placement::kWave, 2) && !rules.allows_placement(Placement::kVShape, 2);
  for (int v = wave_for_v ? 2 : 3; v <= most; v++) wanted.push_back({Placement::kWave, v});
  std::vector<PlacementCandidate> out;
  for (const auto& [placement, v] : wanted) {
    if (!rules.allows_placement(placement, v)) continue;
    Result<Problem> cut = rechunk(p, placement, v);
    if (cut.ok()) out.push_back({placement, v, std::move(cut.value)});
  }
  // One device is no pipeline: Megatron runs virtual stages only with a pipeline size above 1 and
  // torchtitan pipelines nothing at degree 1, so chunks there are searched only when asked for.
  if (p.num_devices == 1 && !out.empty() && out.front().placement == Placement::kLinear) out.resize(1);
  return out;
}

std::vector<int> interleaved_chunk_counts(const std::vector<PlacementCandidate>& space) {
  std::vector<int> out;
  for (const PlacementCandidate& c : space)
    if (c.placement == Placement::kInterleaved) out.push_back(c.chunks_per_device);
  if (out.empty()) out.push_back(2);
  return out;
}

std::string placement_label(Placement placement, int chunks_per_device) {
  return std::string(placement_name(placement)) + " v" + std::to_string(chunks_per_device);
}

}  // namespace optpipe
