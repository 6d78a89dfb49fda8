// Lower bounds that hold for every schedule of a problem, whatever its order, offloads and
// recomputes: those only ever add work or delay it.
#include <algorithm>
#include <limits>

#include "optpipe/optimize.h"

namespace optpipe {

double makespan_lower_bound(const Problem& p) {
  const int S = p.num_stages(), D = p.num_devices, M = p.num_microbatches;
  // Earliest start of the first forward of each stage: the forwards of all earlier stages, and a
  // hop for every change of device on the way.
  std::vector<double> head(S, 0);
  for (int s = 1; s < S; s++)
    head[s] = head[s - 1] + p.stages[s - 1].t_f_us + (p.device_of(s - 1) == p.device_of(s) ? 0 : p.t_comm_us);
  std::vector<double> first(D, std::numeric_limits<double>::infinity()), work(D, 0);
  for (int s = 0; s < S; s++) {
    const int d = p.device_of(s);
    first[d] = std::min(first[d], head[s]);
    const StageSpec& st = p.stages[s];
    work[d] += M * (st.t_f_us + st.t_b_us + st.t_w_us);
  }
  double bound = 0;
  for (int d = 0; d < D; d++) bound = std::max(bound, first[d] + work[d]);
  // One microbatch's own chain: every forward, every input-gradient back, then stage 0's W.
  double chain = head[S - 1];
  for (int s = 0; s < S; s++) chain += (s == S - 1 ? p.stages[s].t_f_us : 0) + p.stages[s].t_b_us;
  for (int s = S - 1; s > 0; s--) chain += p.device_of(s) == p.device_of(s - 1) ? 0 : p.t_comm_us;
  chain += p.stages[0].t_w_us;
  return std::max(bound, chain);
}

std::vector<int64_t> budget_lower_bound(const Problem& p) {
  std::vector<int64_t> out(p.num_devices);
  for (int d = 0; d < p.num_devices; d++) out[d] = p.devices[d].static_bytes;
  for (int s = 0; s < p.num_stages(); s++) {
    const StageSpec& st = p.stages[s];
    // While F runs it holds its whole activation and its workspace, whatever happens later.
    int64_t op = st.act_f_bytes + st.ws_f_bytes;
    const int d = p.device_of(s);
    out[d] = std::max(out[d], p.devices[d].static_bytes + op);
  }
  return out;
}

}  // namespace optpipe
