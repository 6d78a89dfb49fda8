// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two chunks per device
// in a V (stage d and stage 2D−1−d on device d). Zero per-device bubble for M ≥ 2D at 1F1B's
// activation memory (2D half-size chunk activations). This is the hand-written order of the
// zero-bubble repository, which PyTorch's ScheduleZBVZeroBubble also uses; it is generated for
// n = max(2D−1, M) microbatches and the ops of microbatches ≥ M are dropped, so any M works.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_zb_v(const Problem& p) {
  Status st = require_placement(p, "zb-v", Placement::kVShape, 2);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches;
  const int n = std::max(2 * D - 1, M);
  for (int r = 0; r < D; r++) {
    std::vector<Op> ops;
    const int c0 = r, c1 = 2 * D - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (D - r) - 1; k++) ops.push_back(F(c0, f0++));
    for (int k = 0; k < r; k++) {
      ops.push_back(F(c1, f1++));
      ops.push_back(F(c0, f0++));
    }
    for (int k = 0; k < D - r; k++) {
      ops.push_back(F(c1, f1++));
      ops.push_back(B(c1, b1));
      ops.push_back(W(c1, b1++));
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) ops.push_back(F(c0, f0++));
      ops.push_back(B(c0, b0));
      ops.push_back(W(c0, b0++));
      ops.push_back(F(c1, f1++));
      ops.push_back(B(c1, b1));
      ops.push_back(W(c1, b1++));
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; k++) {
      ops.push_back(B(c0, b0++));
      ops.push_back(B(c1, b1++));
    }
    for (int k = 0; k < D - r; k++) {
      ops.push_back(B(c0, b0++));
      ops.push_back(W(c0, w0++));
    }
    while (w1 < b1) ops.push_back(W(c1, w1++));
    while (w0 < b0) ops.push_back(W(c0, w0++));
    for (const Op& op : ops)
      if (op.microbatch < M) s.devices[r].compute.push_back(op);
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
