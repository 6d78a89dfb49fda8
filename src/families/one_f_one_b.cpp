// 1F1B (PipeDream-flush / DAPPLE): device d runs min(D−d−1, M) warm-up forwards, then alternates
// one forward with one fused backward, then drains the backwards. At most min(D−d, M)
// activations are alive on device d.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_1f1b(const Problem& p) {
  Status st = require_placement(p, "1f1b", Placement::kLinear, 1);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches;
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    const int warmup = std::min(D - d - 1, M);
    for (int i = 0; i < warmup; i++) ops.push_back(F(d, i));
    for (int i = 0; i + warmup < M; i++) {
      ops.push_back(F(d, warmup + i));
      ops.push_back(BW(d, i));
    }
    for (int i = M - warmup; i < M; i++) ops.push_back(BW(d, i));
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
