// Builders the tests share.
#pragma once

#include <random>

#include "optpipe/problem.h"

namespace optpipe {

// A small linear problem with random costs, bytes, static memory and host link (sometimes one
// link shared by every device), and a budget nothing reaches.
inline Problem random_problem(std::mt19937& rng) {
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  p.num_devices = pick(1, 6);
  p.num_microbatches = pick(1, 3 * p.num_devices + 2);
  p.placement = Placement::kLinear;
  p.chunks_per_device = 1;
  p.t_comm_us = pick(0, 1) ? 0 : uni(0, 30);
  for (int s = 0; s < p.num_devices; s++) {
    StageSpec st;
    st.t_f_us = uni(10, 100);
    st.t_b_us = uni(10, 200);
    st.t_w_us = uni(5, 100);
    st.t_r_us = st.t_f_us;
    st.act_f_bytes = pick(1000, 100000);
    st.act_w_bytes = -pick(0, static_cast<int>(st.act_f_bytes));
    st.act_b_bytes = -st.act_f_bytes - st.act_w_bytes;
    st.act_input_bytes = pick(0, static_cast<int>(st.act_f_bytes) / 4);
    st.ws_b_bytes = pick(0, 1) ? 0 : pick(0, 5000);
    p.stages.push_back(st);
  }
  for (int d = 0; d < p.num_devices; d++) {
    DeviceSpec dev;
    dev.static_bytes = pick(0, 1000000);
    dev.mem_budget_bytes = 1ll << 40;
    dev.host_link = pick(0, 1) ? 0 : d;  // sometimes one shared link
    p.devices.push_back(dev);
  }
  p.host_link = {uni(0.5, 50), uni(0.5, 50), uni(0, 10)};
  return p;
}

}  // namespace optpipe
