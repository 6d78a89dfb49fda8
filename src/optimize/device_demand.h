// What one device must hold and run, as the makespan bound sees it (private to the optimizer):
// shared by the bound of one partition (bounds.cpp) and the bound over every partition
// (partition.cpp), which prices each candidate stage with the same rules.
#pragma once

#include <vector>

#include "optpipe/problem.h"

namespace optpipe {

// One of the device's stages where it sits in the pipeline.
struct StageLoad {
  StageSpec spec;
  double head_us = 0;        // the earliest its first forward can start
  double round_trip_us = 0;  // F's end → B's start at least: the later stages' F and B, and hops
  double offload_us = 0, reload_us = 0;
  double after_b_us = 0;  // B's end → the microbatch's end at least (stage 0: its own W)
  // Its forwards start at least this far apart, microbatch after microbatch: no stage up to it
  // runs its forwards faster than one a t_F (at least its own t_F).
  double f_interval_us = 0;
};

struct DeviceDemand {
  double first_us = 0;        // the earliest its first op can start
  double work_us = 0;         // all its F, B and W
  double capacity_bytes = 0;  // budget − static (≤ 0: nothing fits, no memory bound applies)
  int num_microbatches = 0;
  bool offload = true, recompute = true;  // the choices the rules allow (a bound may assume them)
  // After its last B (one of its first stage: a later stage's B of the same microbatch comes
  // before) the chain on to the end: the B's of the stages before its first, the hops between
  // them, and stage 0's W. 0 where the device holds stage 0.
  double tail_us = 0;
  std::vector<StageLoad> stages;
  // Stages of the device not priced here (the bound over every partition prices one at a
  // time): each may run forwards from head_us on, taken as free fill of the warm-up, and its
  // first backward comes no sooner than tau_us.
  struct Unpriced {
    double head_us, tau_us;
  };
  std::vector<Unpriced> unpriced;
  // The most W time per byte a pending W of an unpriced stage can hold (∞: some W holds none).
  double unpriced_w_us_per_byte = 0;
};

// Idle time before the device's first backward that no order, offload or recompute can fill.
// Every stage of the device must be in `stages` or `unpriced` (fewer forwards fill less).
double warmup_idle_us(const DeviceDemand& d);

// Idle time after the device's last backward that no order can fill: tail_us less the W's it
// can still run then, as many as its capacity holds pending.
double cooldown_idle_us(const DeviceDemand& d);

// Whether the device's activations can fit its capacity over a makespan of T (see
// makespan_lower_bound). Holds for any subset of the device's stages: dropping a stage drops at
// least as much area as its choices could save.
bool memory_fits_by(const DeviceDemand& d, double T);

// The least T ≥ first + work that memory_fits_by.
double memory_bound_us(const DeviceDemand& d);

}  // namespace optpipe
