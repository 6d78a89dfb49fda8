// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B with the backward split.
// Stage s warms up like 1F1B, runs s forward/input-gradient pairs with their W deferred, then
// F, B, W triples whose W is the oldest pending one, then drains. The deferred W's fill the
// cool-down bubbles: bubble (D−1)(t_F + t_B − t_W), a third of 1F1B's when the three are equal,
// at 1F1B's peak memory. This is Megatron-DeepSpeed's ZeroBubbleH1Pipeline order (exact
// semantics), which PyTorch's interleaved zero-bubble schedule also gives at v = 1.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_zb_h1(const Problem& p) {
  Status st = require_placement(p, "zb-h1", Placement::kLinear, 1);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches;
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    int f = 0, b = 0, w = 0;
    for (int k = 0; k < D - d - 1 && f < M; k++) ops.push_back(F(d, f++));
    for (int k = 0; k < d && f < M; k++) {
      ops.push_back(F(d, f++));
      ops.push_back(B(d, b++));
    }
    while (f < M) {
      ops.push_back(F(d, f++));
      ops.push_back(B(d, b++));
      ops.push_back(W(d, w++));
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
