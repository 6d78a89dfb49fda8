// 1F1B with full recomputation: every forward keeps only its chunk input; a recompute runs right
// before each backward. Activation memory drops to the inputs in flight plus one microbatch's
// activations, at the cost of one extra forward per microbatch.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_1f1b_recompute(const Problem& p) {
  Result<Schedule> base = make_1f1b(p);
  if (!base.ok()) return base;
  Schedule s = empty_schedule(p);
  for (int d = 0; d < p.num_devices; d++) {
    for (const Op& op : base.value.devices[d].compute) {
      if (op.kind == OpKind::kBW) s.devices[d].compute.push_back(R(op.stage, op.microbatch));
      s.devices[d].compute.push_back(op);
    }
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
