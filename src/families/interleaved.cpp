// Interleaved 1F1B (Megatron-LM): v chunks per device, stage s on device s mod D. Forwards walk
// "virtual microbatches" in groups: all of a group's microbatches through chunk 0, then chunk 1,
// ...; backwards the same with the chunks reversed. Device d warms up with 2(D−d−1) + (v−1)·N
// forwards (N: the largest group), then alternates one forward and one backward, then drains.
// Groups are D microbatches when D divides M (Megatron's rule, which refuses any other M);
// otherwise ⌊M/D⌋ groups as equal as possible, each at least D long, as PyTorch does when it can.
// Bubble ≈ 1F1B's ÷ v.
#include "families/common.h"

namespace optpipe {

namespace {

struct Groups {
  int count, size_small, num_large;  // num_large groups of size_small + 1 come first

  explicit Groups(int D, int M) : count(std::max(1, M / D)), size_small(M / count), num_large(M % count) {}
  int size(int g) const { return size_small + (g < num_large ? 1 : 0); }
  int largest() const { return size_small + (num_large > 0 ? 1 : 0); }
};

// Every virtual microbatch k in order: which chunk and microbatch it is. Listed once, in one
// pass over the groups (looked up per k, it made long pipelines quadratic).
struct Virtual {
  int chunk, mb;
};
std::vector<Virtual> virtual_microbatches(const Groups& groups, int v) {
  std::vector<Virtual> out;
  int base_mb = 0;
  for (int g = 0; g < groups.count; g++) {
    for (int r = 0; r < groups.size(g) * v; r++) out.push_back({r / groups.size(g), base_mb + r % groups.size(g)});
    base_mb += groups.size(g);
  }
  return out;
}

}  // namespace

Result<Schedule> make_interleaved_1f1b(const Problem& p) {
  Status st = require_placement(p, "interleaved-1f1b", Placement::kInterleaved, 0);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches, v = p.chunks_per_device;
  const int total = M * v;
  const Groups groups(D, M);
  const std::vector<Virtual> virtuals = virtual_microbatches(groups, v);
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    auto forward = [&](int k) { ops.push_back(F(virtuals[k].chunk * D + d, virtuals[k].mb)); };
    auto backward = [&](int k) { ops.push_back(BW((v - 1 - virtuals[k].chunk) * D + d, virtuals[k].mb)); };
    const int warmup = M == D ? total : std::min(total, 2 * (D - d - 1) + (v - 1) * groups.largest());
    for (int k = 0; k < warmup; k++) forward(k);
    for (int k = 0; k + warmup < total; k++) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; k++) backward(k);
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
