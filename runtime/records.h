// records.h — what a rank measured in a run, how it travels to the launcher (JSON files in the
// run directory), and how the launcher sets it beside the simulator's prediction.
// No LibTorch here: the launcher side reads these without touching tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/simulate.h"
#include "optpipe/status.h"

namespace optpipe::runtime {

double monotonic_us();                 // CLOCK_MONOTONIC, shared by every process on the machine
double median(std::vector<double> v);  // 0 for none

// Times are CLOCK_MONOTONIC µs, shared by every process on the machine.
struct OpRecord {
  Op op;
  double start_us = 0, end_us = 0;
};
struct MemoryEvent {
  double time_us = 0;
  int64_t bytes = 0;  // live activation bytes from this time on
};
struct IterationRecord {
  double start_us = 0;        // after the iteration's start barrier
  std::vector<OpRecord> ops;  // compute, offload and reload ops of this rank
  std::vector<MemoryEvent> memory;
  int64_t peak_activation_bytes = 0;
  int gate_holds = 0;       // allocations the memory gate held until frees made room
  double gate_held_us = 0;  // ... and for how long, summed
  double loss = 0;          // over all microbatches (every rank learns it from the last stage's rank)
  // On a GPU, the CUDA caching allocator's peaks over the iteration (every tensor: parameters,
  // gradients, optimizer state, activations and temporaries); 0 on the CPU.
  int64_t allocator_peak_bytes = 0, allocator_reserved_bytes = 0;
};
struct CheckRecord {
  double loss = 0, reference_loss = 0;
  double max_grad_rel_error = 0;  // max over this rank's parameters of max|g − g_ref| / max|g_ref|
  std::string worst_param;
  int num_params_checked = 0;
};
struct RankReport {
  int rank = 0;
  std::string device = "cpu";  // "cuda:0 (NVIDIA H200)"
  std::string hops = "gloo";   // what carried activations and gradients between ranks
  int64_t pinned_bytes = 0;    // host buffers the offloads copied into (GPU only)
  std::vector<IterationRecord> iterations;
  bool checked = false;
  CheckRecord check;
  std::string profile_json;  // with --reprofile: this rank's share, as problem JSON
};

std::string rank_report_to_json(const RankReport& r);
Result<RankReport> rank_report_from_json(const std::string& text);

// A run beside the prediction for the same schedule and problem.
struct RunComparison {
  std::string device, hops;          // rank 0's device ("cpu", "cuda:0 (…)") and what carried the hops
  std::vector<double> iteration_us;  // per iteration: last op end − earliest rank start
  std::vector<double> losses;
  int shown_iteration = 0;  // the median-time iteration after the first (the first warms up)
  double measured_us = 0, predicted_us = 0;
  // The simulator on the op durations this run measured (per stage and kind, the median over the
  // shown iteration): what is left once the machine's speed is taken out of the prediction.
  double replayed_us = 0;
  std::vector<double> measured_idle_us, predicted_idle_us;         // per device, shown iteration
  std::vector<int64_t> measured_peak_bytes, predicted_peak_bytes;  // live activations, per device, max over iterations
  std::vector<int64_t> allocator_peak_bytes, allocator_reserved_bytes;  // per device, max over iterations (GPU)
  std::vector<int> gate_holds;       // per device, summed over iterations: allocations the memory gate held
  std::vector<double> gate_held_us;  // ... and for how long
  Timeline measured;                 // the shown iteration, from its start; memory = static + live activations
};
RunComparison compare_run(const Problem& p, const Schedule& s, const Timeline& predicted,
                          const std::vector<RankReport>& ranks);

}  // namespace optpipe::runtime
