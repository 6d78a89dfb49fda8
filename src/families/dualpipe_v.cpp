// DualPipeV (DeepSeek-V3 report; deepseek-ai/DualPipe dualpipev.py, ported to PyTorch as
// ScheduleDualPipeV): V-shape, stage d and 2D−1−d on device d, in eight phases. Its overlapped
// "F of one chunk + full backward of the other" steps are written here as that F followed by
// that BW, which is how a runtime without a fused overlap kernel executes them. Needs M ≥ 2D.
// Deferred W's are popped first in, first out.
#include <deque>

#include "families/common.h"

namespace optpipe {

Result<Schedule> make_dualpipe_v(const Problem& p) {
  Status st = require_placement(p, "dualpipe-v", Placement::kVShape, 2);
  if (!st.ok()) return Result<Schedule>::Error(st);
  const int D = p.num_devices, M = p.num_microbatches;
  if (M < 2 * D)
    return Result<Schedule>::Error(Status::Invalid("dualpipe-v needs at least 2·D = " + std::to_string(2 * D) +
                                                   " microbatches, got " + std::to_string(M)));
  Schedule s = empty_schedule(p);
  for (int r = 0; r < D; r++) {
    std::vector<Op>& ops = s.devices[r].compute;
    const int s0 = r, s1 = 2 * D - 1 - r;
    // Next microbatch per stage (index 0: s0, 1: s1) for forwards and for backwards.
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::deque<Op> pending_w;
    auto idx = [&](int stage) { return stage == s0 ? 0 : 1; };
    auto fwd = [&](int stage) { ops.push_back(F(stage, next_f[idx(stage)]++)); };
    auto full_bwd = [&](int stage) { ops.push_back(BW(stage, next_b[idx(stage)]++)); };
    auto input_bwd = [&](int stage) {
      const Op b = B(stage, next_b[idx(stage)]++);
      ops.push_back(b);
      pending_w.push_back(W(stage, b.microbatch));
    };
    auto pop_w = [&]() {
      if (pending_w.empty()) return;
      ops.push_back(pending_w.front());
      pending_w.pop_front();
    };
    auto overlap = [&](int f_stage, int b_stage) {  // F of one chunk, then BW of the other
      fwd(f_stage);
      full_bwd(b_stage);
    };

    for (int k = 0; k < 2 * (D - r - 1); k++) fwd(s0);  // 1
    for (int k = 0; k < r + 1; k++) {
      fwd(s0);
      fwd(s1);
    }  // 2
    for (int k = 0; k < D - r - 1; k++) {
      input_bwd(s1);
      pop_w();
      fwd(s1);
    }                                              // 3
    for (int i = 0; i < M - 2 * D + r + 1; i++) {  // 4: main loop
      if (i == 0 && r == D - 1) {
        fwd(s0);
        full_bwd(s1);
      } else {
        overlap(s0, s1);
      }
      overlap(s1, s0);
    }
    for (int k = 0; k < D - r - 1; k++) {
      full_bwd(s1);
      overlap(s1, s0);
    }                          // 5
    bool zero_bubble = false;  // 6
    for (int i = 0; i < r + 1; i++) {
      if (i == (r + 1) / 2 && r % 2 == 1) zero_bubble = true;
      zero_bubble ? input_bwd(s1) : full_bwd(s1);
      if (i == (r + 1) / 2 && r % 2 == 0) zero_bubble = true;
      zero_bubble ? input_bwd(s0) : full_bwd(s0);
    }
    for (int k = 0; k < D - r - 1; k++) {  // 7
      pop_w();
      zero_bubble ? input_bwd(s0) : full_bwd(s0);
    }
    while (!pending_w.empty()) pop_w();  // 8
  }
  return Result<Schedule>::Of(std::move(s));
}

}  // namespace optpipe
