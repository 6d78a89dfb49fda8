// ZB-H2 (Qi et al. 2023): enough extra warm-up forwards that no device waits in steady state.
// Stage s warms up with 2(D−1−s)+1 forwards, then alternates input-gradient B with forward,
// deferring W until 2D activations would be alive, then drains B/W pairs and the last W's.
// Zero per-device bubble for M ≥ 2D−1 at about twice 1F1B's activation memory (2D on every
// device). The zero-bubble repository builds ZB-H2 with a greedy under a 2D memory limit; this
// is the order that greedy converges to, in closed form, so it is the same for every cost.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_zb_h2(const Problem& p) {
  Status st = require_placement(p, "zb-h2", Placement::kLinear, 1);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches;
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    int f = 0, b = 0, w = 0;
    const int warmup = std::min(M, 2 * (D - 1 - d) + 1);
    while (f < warmup) ops.push_back(F(d, f++));
    while (f < M) {
      ops.push_back(B(d, b++));
      if (f - w >= 2 * D) ops.push_back(W(d, w++));
      ops.push_back(F(d, f++));
    }
    while (b < M) {
      ops.push_back(B(d, b++));
      ops.push_back(W(d, w++));
    }
    while (w < M) ops.push_back(W(d, w++));
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
