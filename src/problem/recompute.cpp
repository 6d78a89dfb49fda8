// Megatron's selective recompute folded into a problem's stages (with_recompute_layers).
#include <algorithm>
#include <cmath>
#include <string>

#include "optpipe/problem.h"

namespace optpipe {

Status check_no_recompute_layers(const Problem& p) {
  for (size_t s = 0; s < p.stages.size(); s++)
    if (p.stages[s].recompute_layers > 0)
      return Status::Invalid("stages[" + std::to_string(s) + "].recompute_layers is " +
                             std::to_string(p.stages[s].recompute_layers) +
                             ": this takes the model as profiled, without a recompute configuration");
  return Status::Ok();
}

Result<Problem> with_recompute_layers(const Problem& p, const std::vector<int>& layers, bool weights_in_b) {
  using R = Result<Problem>;
  if (Status st = check_no_recompute_layers(p); !st.ok()) return R::Error(st);
  if (layers.size() != p.stages.size())
    return R::Error(Status::Invalid("recompute layers: " + std::to_string(layers.size()) + " counts for " +
                                    std::to_string(p.stages.size()) + " stages"));
  Problem q = p;
  for (size_t s = 0; s < q.stages.size(); s++) {
    StageSpec& g = q.stages[s];
    const int k = layers[s], n = g.num_layers;
    if (k < 0 || k > n)
      return R::Error(Status::Invalid("recompute layers of stage " + std::to_string(s) + ": " + std::to_string(k) +
                                      " is not in 0.." + std::to_string(n)));
    if (k == 0) continue;
    const double share = static_cast<double>(k) / n;
    const int64_t layer_bytes = g.act_f_bytes / n;
    const int64_t dropped = static_cast<int64_t>(std::llround(share * g.act_f_bytes));
    g.act_f_bytes = std::min(g.act_f_bytes, g.act_f_bytes - dropped + k * g.act_input_bytes);
    if (weights_in_b) {
      g.act_w_bytes -= static_cast<int64_t>(std::llround(share * g.act_w_bytes));
      g.t_b_us += share * g.t_w_us;
      g.t_w_us -= share * g.t_w_us;
    }
    g.act_b_bytes = -g.act_f_bytes - g.act_w_bytes;
    g.t_b_us += share * g.t_r_us;
    g.ws_b_bytes += layer_bytes;
    g.recompute_layers = k;
  }
  Status st = check_problem(q);
  if (!st.ok()) return R::Error(st);
  return R::Of(std::move(q));
}

}  // namespace optpipe
