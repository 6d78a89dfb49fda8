// Interleaved zero bubble, as torch's ScheduleInterleavedZeroBubble runs it (ZB-1P over v chunks a
// device): stage s on device s mod D. Microbatches go in rounds of N = M / max(1, ⌊M/D⌋) (torch
// refuses an M the rounds do not divide). Device d warms up with (v−1)·N + (D−1−d) forwards, one
// less a hop than interleaved 1F1B; then each step runs a forward and an input-gradient backward
// B, and from the d-th step on the W of the oldest B still pending; the cool-down runs the
// remaining B's, each followed by a pending W, then the W's left. Forwards walk the chunks
// upwards a round at a time, backwards downwards, as in interleaved 1F1B.
#include "families/common.h"

namespace optpipe {

Result<Schedule> make_interleaved_zb(const Problem& p) {
  Status st = require_placement(p, "interleaved-zb", Placement::kInterleaved, 0);
  if (!st.ok()) return Result<Schedule>::Error(st);
  const int D = p.num_devices, M = p.num_microbatches, v = p.chunks_per_device;
  const int rounds = std::max(1, M / D);
  if (M % rounds != 0)
    return Result<Schedule>::Error(
        Status::Invalid("interleaved-zb: torch's zero-bubble schedule needs the microbatches (" + std::to_string(M) +
                        ") a multiple of its rounds (" + std::to_string(rounds) + ")"));
  const int per_round = M / rounds, total = M * v;
  Schedule s = empty_schedule(p);
  for (int d = 0; d < D; d++) {
    std::vector<Op>& ops = s.devices[d].compute;
    const int warmup = std::min(total, (v - 1) * per_round + (D - 1 - d));
    auto forward_stage = [&](int step) { return (step / per_round) % v * D + d; };
    auto backward_stage = [&](int step) { return (v - 1 - (step - warmup) / per_round % v) * D + d; };
    std::vector<int> next_f(p.num_stages(), 0), next_b(p.num_stages(), 0), next_w(p.num_stages(), 0);
    std::vector<int> backward_steps;  // the steps whose B ran, in order: their W's follow in that order
    int w_done = 0;
    auto weight = [&] {
      const int stage = backward_stage(backward_steps[w_done++]);
      ops.push_back(W(stage, next_w[stage]++));
    };
    for (int step = 0; step < total + warmup; step++) {
      if (step < total) {
        const int stage = forward_stage(step);
        ops.push_back(F(stage, next_f[stage]++));
      }
      if (step < warmup) continue;
      const int stage = backward_stage(step);
      ops.push_back(B(stage, next_b[stage]++));
      backward_steps.push_back(step);
      if (step - warmup >= d) weight();
    }
    while (w_done < static_cast<int>(backward_steps.size())) weight();
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
