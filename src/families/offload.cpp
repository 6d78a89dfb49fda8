// PipeOffload-style (Wan et al., ICML 2025): interleaved 1F1B whose long-lived activations go to
// host memory between their forward and backward. Following the zero-bubble repository's
// offloading pass, an activation is offloaded only when its lifespan covers the round trip with
// room to spare: the offload (queued behind earlier ones on the device-to-host channel) must end
// at least one reload time before the reload has to start, and the reload is issued when the
// compute stream reaches the op that starts two reload times before the backward, so it lands
// with one reload time of slack. Times come from simulating the plain interleaved schedule. As
// PipeOffload's runtime waits on the copy before reusing its memory, the schedule is gated to fit
// under any timing (any_timing.h).
#include <algorithm>
#include <cmath>

#include "families/common.h"
#include "optpipe/any_timing.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

Result<Schedule> make_pipeoffload(const Problem& p) {
  Result<Schedule> base = make_interleaved_1f1b(p);
  if (!base.ok()) return base;
  Schedule s = add_offloads(p, base.value);
  SimResult sim = simulate(p, s, {.op_times = true, .any_timing = false});
  OPTPIPE_CHECK(sim.ok(), "the PipeOffload pass produced a schedule that does not simulate: " + sim.status.message);
  return Result<Schedule>::Of(gate_for_any_timing(p, s, sim.timeline).schedule);
}

}  // namespace optpipe
