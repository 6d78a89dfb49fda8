#include "check.h"

#include <algorithm>

namespace optpipe::runtime {

CheckRecord check_gradients(const Problem& p, int device, const GptConfig& cfg, const std::vector<ChunkParams>& chunks,
                            int iteration, double loss) {
  const ReferenceResult ref = reference_gradients(cfg, chunks, iteration);
  CheckRecord check;
  check.loss = loss;
  check.reference_loss = ref.loss;
  for (int st = 0; st < p.num_stages(); st++) {
    if (p.device_of(st) != device) continue;
    for (size_t q = 0; q < chunks[st].grads.size(); q++) {
      const at::Tensor& g = chunks[st].grads[q];
      const at::Tensor& g_ref = ref.grads[st][q];
      // Relative to the tensor's largest entry: element-wise ratios blow up on entries near 0.
      const double scale = std::max(g_ref.abs().max().item<double>(), 1e-30);
      const double err = (g - g_ref).abs().max().item<double>() / scale;
      check.num_params_checked++;
      if (err >= check.max_grad_rel_error) {
        check.max_grad_rel_error = err;
        check.worst_param = chunks[st].names[q];
      }
    }
  }
  return check;
}

}  // namespace optpipe::runtime
