// noise.h — how a schedule fares when real durations differ from the profile.
//
// The noise model: every op's and transfer's duration is multiplied by an independent mean-one
// lognormal factor exp(σZ − σ²/2) (per-op jitter), optionally times a factor drawn once per
// sample for each stage and each host link (profile error). Sample k's factors depend only on
// the problem, the spec and k, never on the schedule, so two schedules meet the same draws
// (common random numbers) and their difference is not sampling noise.
//
// Each sample is simulated twice: as planned (does any device pass its budget? on a GPU that is
// an out-of-memory failure), and with the runtime's rule that an allocation over budget waits
// for frees (SimOptions::gate_memory; a sample where nothing can make room is stuck). The
// makespans reported are the gated ones, what a run would take.
//
//   NoiseReport r = evaluate_noise(problem, schedule, {.jitter_sigma = 0.05, .samples = 200}).value;
#pragma once

#include <cstdint>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

struct NoiseSpec {
  double jitter_sigma = 0.05;  // per op and transfer
  double profile_sigma = 0;    // per stage and per host link, once per sample
  int samples = 200;
  uint64_t seed = 1;
};

Status check_noise_spec(const NoiseSpec& spec);

// Draws sample k's duration factors, by op id (SimOptions::duration_factors).
class NoiseSampler {
 public:
  NoiseSampler(const Problem& p, const NoiseSpec& spec);
  void draw(int sample, std::vector<double>* factors) const;

 private:
  const Problem& p_;
  NoiseSpec spec_;
};

// Duration factors by op id, one vector per sample (NoiseSampler): with them a schedule is scored
// by the p90 of its makespan over those samples, as gated to fit under any timing.
using NoiseSamples = std::vector<std::vector<double>>;

struct [[nodiscard]] NoiseReport {
  int samples = 0;
  int overflowed = 0;  // as planned, some device passed its budget
  int stuck = 0;       // gated, nothing could make room: the run cannot finish
  // Over the samples that finished (gated); NaN when none did.
  double mean_makespan_us = 0, p50_makespan_us = 0, p95_makespan_us = 0;
  std::vector<int64_t> worst_peak_bytes;  // per device, the largest peak as planned over samples
};

// q-quantile (0..1) of `values` by the nearest-rank rule; NaN when empty. Reorders `values`.
double quantile(std::vector<double>& values, double q);

// InvalidInput when the schedule does not simulate or the spec is out of range.
Result<NoiseReport> evaluate_noise(const Problem& p, const Schedule& s, const NoiseSpec& spec);

}  // namespace optpipe
