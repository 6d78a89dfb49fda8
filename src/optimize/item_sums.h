// Stage costs of any cut of a problem's items, from prefix sums (private to the optimizer): what
// the bounds over every partition (partition_bound.cpp, pair_bound.cpp) price each candidate
// stage with, as cut_layers would build it.
#pragma once

#include <algorithm>
#include <vector>

#include "optimize/device_demand.h"
#include "optpipe/problem.h"
#include "optpipe/schedule_rules.h"

namespace optpipe {

// Stage s of p holding items [i, j): its spec as cut_layers builds it, and where it sits (its
// head follows from the items before i, its round trip from those from j on), from prefix sums.
class ItemSums {
 public:
  ItemSums(const Problem& p, const ScheduleRules& rules)
      : offload(rules.offload),
        recompute(rules.recompute),
        p_(p),
        S_(p.num_stages()),
        L_(static_cast<int>(p.layers.size())) {
    for (std::vector<double>* v : {&t_f_, &t_b_, &t_w_, &t_r_, &act_f_, &act_w_, &static_}) v->assign(L_ + 1, 0);
    for (int k = 0; k < L_; k++) {  // [k]: the sum over items 0..k−1
      const LayerSpec& l = p.layers[k];
      t_f_[k + 1] = t_f_[k] + l.t_f_us;
      t_b_[k + 1] = t_b_[k] + l.t_b_us;
      t_w_[k + 1] = t_w_[k] + l.t_w_us;
      t_r_[k + 1] = t_r_[k] + l.t_r_us;
      act_f_[k + 1] = act_f_[k] + static_cast<double>(l.act_f_bytes);
      act_w_[k + 1] = act_w_[k] + static_cast<double>(l.act_w_bytes);
      static_[k + 1] = static_[k] + static_cast<double>(l.static_bytes);
    }
    hops_before_.assign(S_, 0);  // changes of device before stage s
    for (int s = 1; s < S_; s++) hops_before_[s] = hops_before_[s - 1] + (p.device_of(s) != p.device_of(s - 1));
  }

  double work_us(int i, int j) const { return t_f_[j] - t_f_[i] + t_b_[j] - t_b_[i] + t_w_[j] - t_w_[i]; }
  double static_bytes(int i, int j) const { return static_[j] - static_[i]; }
  // The earliest stage s's first forward can start when its first item is i.
  double head_us(int s, int i) const { return t_f_[i] + hops_before_[s] * p_.t_comm_us; }
  // The earliest stage s's first backward can start when its last item ends before j.
  double tau_us(int s, int j) const {
    return t_f_[L_] + t_b_[L_] - t_b_[j] + (2 * hops_before_[S_ - 1] - hops_before_[s]) * p_.t_comm_us;
  }
  // After stage s's B when its first item is i, to the microbatch's end at least (bounds.cpp's
  // tails): the items before i back, the hops, and item 0's W (stage 0 holds it).
  double tail_us(int s, int i) const {
    return s == 0 ? 0 : t_b_[i] + hops_before_[s] * p_.t_comm_us + p_.layers[0].t_w_us;
  }

  StageLoad stage(int s, int i, int j) const {
    StageLoad sl;
    StageSpec& st = sl.spec;
    st.t_f_us = t_f_[j] - t_f_[i];
    st.t_b_us = t_b_[j] - t_b_[i];
    st.t_w_us = t_w_[j] - t_w_[i];
    st.t_r_us = t_r_[j] - t_r_[i];
    st.act_f_bytes = static_cast<int64_t>(act_f_[j] - act_f_[i]);
    st.act_w_bytes = static_cast<int64_t>(act_w_[j] - act_w_[i]);
    st.act_input_bytes = std::min(p_.layers[i].act_input_bytes, st.act_f_bytes);
    sl.head_us = head_us(s, i);
    sl.round_trip_us =
        (t_f_[L_] - t_f_[j]) + (t_b_[L_] - t_b_[j]) + 2 * (hops_before_[S_ - 1] - hops_before_[s]) * p_.t_comm_us;
    sl.offload_us = p_.host_link.d2h_us(st.act_f_bytes);
    sl.reload_us = p_.host_link.h2d_us(st.act_f_bytes);
    sl.after_b_us = s == 0 ? st.t_w_us : tail_us(s, i);
    // The stages before hold items [0, i): the slowest of them is at least their mean.
    sl.f_interval_us = std::max(st.t_f_us, s > 0 ? t_f_[i] / s : 0);
    return sl;
  }

  const bool offload, recompute;  // the choices the rules allow, for every DeviceDemand priced

 private:
  const Problem& p_;
  int S_, L_;
  std::vector<double> t_f_, t_b_, t_w_, t_r_, act_f_, act_w_, static_;
  std::vector<int> hops_before_;
};

}  // namespace optpipe
