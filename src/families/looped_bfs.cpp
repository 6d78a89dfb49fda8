// Looped BFS (breadth-first pipeline parallelism, as torch's ScheduleLoopedBFS runs it): v chunks
// per device, stage s on device s mod D. Each device runs every microbatch's forward through its
// first chunk, then its next chunk, ...; then its chunks in reverse, each with every microbatch's
// fused backward in reverse. Holds every activation of its chunks at once (GPipe's memory), with
// the bubble of a pipeline v times deeper in chunks.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_looped_bfs(const Problem& p) {
  Status st = require_placement(p, "looped-bfs", Placement::kInterleaved, 0);
  if (!st.ok()) return Result<Schedule>::Error(st);
  Schedule s = empty_schedule(p);
  const int D = p.num_devices, M = p.num_microbatches, v = p.chunks_per_device;
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    for (int c = 0; c < v; c++)
      for (int i = 0; i < M; i++) ops.push_back(F(c * D + d, i));
    for (int c = v - 1; c >= 0; c--)
      for (int i = M - 1; i >= 0; i--) ops.push_back(BW(c * D + d, i));
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
