// GPipe: every forward, then every backward (fused B+W). Holds all M activations at once.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_gpipe(const Problem& p) {
  Status st = require_placement(p, "gpipe", Placement::kLinear, 1);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  for (int d = 0; d < p.num_devices; d++) {
    for (int i = 0; i < p.num_microbatches; i++) s.devices[d].compute.push_back(F(d, i));
    for (int i = 0; i < p.num_microbatches; i++) s.devices[d].compute.push_back(BW(d, i));
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
