// Noise evaluation (noise.h): per-sample duration factors and the two simulations of each sample.
#include "optpipe/noise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "optpipe/simulate.h"

namespace optpipe {

Status check_noise_spec(const NoiseSpec& spec) {
  if (!(spec.jitter_sigma >= 0 && spec.jitter_sigma <= 2))
    return Status::Invalid("noise: the jitter sigma must be in [0, 2], got " + std::to_string(spec.jitter_sigma));
  if (!(spec.profile_sigma >= 0 && spec.profile_sigma <= 2))
    return Status::Invalid("noise: the profile-error sigma must be in [0, 2], got " + std::to_string(spec.profile_sigma));
  if (spec.samples < 1 || spec.samples > 1000000)
    return Status::Invalid("noise: samples must be in [1, 1000000], got " + std::to_string(spec.samples));
  return Status::Ok();
}

NoiseSampler::NoiseSampler(const Problem& p, const NoiseSpec& spec) : p_(p), spec_(spec) {}

void NoiseSampler::draw(int sample, std::vector<double>* factors) const {
  // One stream per sample: sample k draws the same numbers whatever was drawn before it.
  std::seed_seq seq{static_cast<uint32_t>(spec_.seed), static_cast<uint32_t>(spec_.seed >> 32), static_cast<uint32_t>(sample)};
  std::mt19937_64 rng(seq);
  std::normal_distribution<double> z(0.0, 1.0);
  auto lognormal = [&](double sigma) { return sigma > 0 ? std::exp(sigma * z(rng) - sigma * sigma / 2) : 1.0; };
  const int S = p_.num_stages(), M = p_.num_microbatches;
  std::vector<double> stage_factor(S), link_factor;
  for (double& f : stage_factor) f = lognormal(spec_.profile_sigma);
  int links = 0;
  for (const DeviceSpec& d : p_.devices) links = std::max(links, d.host_link + 1);
  link_factor.resize(2 * static_cast<size_t>(links));  // device-to-host, host-to-device
  for (double& f : link_factor) f = lognormal(spec_.profile_sigma);
  factors->resize(num_op_ids(p_));
  for (int kind = 0; kind < kNumOpKinds; kind++)
    for (int s = 0; s < S; s++) {
      const int link = p_.devices[p_.device_of(s)].host_link;
      const double common = kind == static_cast<int>(OpKind::kOffload)  ? link_factor[2 * link]
                            : kind == static_cast<int>(OpKind::kReload) ? link_factor[2 * link + 1]
                                                                         : stage_factor[s];
      for (int i = 0; i < M; i++) (*factors)[op_id(S, M, Op{static_cast<OpKind>(kind), s, i})] = common * lognormal(spec_.jitter_sigma);
    }
}

double quantile(std::vector<double>& values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t k = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

Result<NoiseReport> evaluate_noise(const Problem& p, const Schedule& s, const NoiseSpec& spec) {
  if (Status st = check_noise_spec(spec); !st.ok()) return Result<NoiseReport>::Error(st);
  NoiseReport out;
  out.samples = spec.samples;
  out.worst_peak_bytes.assign(p.num_devices, 0);
  const NoiseSampler sampler(p, spec);
  std::vector<double> factors, makespans;
  for (int k = 0; k < spec.samples; k++) {
    sampler.draw(k, &factors);
    SimResult plain = simulate(p, s, {.op_times = false, .any_timing = false, .duration_factors = &factors});
    if (!plain.ok()) return Result<NoiseReport>::Error(plain.status);
    bool over = false;
    for (int d = 0; d < p.num_devices; d++) {
      const int64_t peak = plain.timeline.devices[d].peak_bytes;
      out.worst_peak_bytes[d] = std::max(out.worst_peak_bytes[d], peak);
      over |= peak > p.devices[d].mem_budget_bytes;
    }
    if (!over) {  // nothing waits for room: the gated run is this one
      makespans.push_back(plain.timeline.makespan_us);
      continue;
    }
    out.overflowed++;
    SimResult gated =
        simulate(p, s, {.op_times = false, .any_timing = false, .duration_factors = &factors, .gate_memory = true});
    if (gated.ok())
      makespans.push_back(gated.timeline.makespan_us);
    else if (gated.out_of_memory)
      out.stuck++;
    else
      return Result<NoiseReport>::Error(gated.status);
  }
  double sum = 0;
  for (double m : makespans) sum += m;
  out.mean_makespan_us = makespans.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(makespans.size());
  out.p50_makespan_us = quantile(makespans, 0.5);
  out.p95_makespan_us = quantile(makespans, 0.95);
  return Result<NoiseReport>::Of(std::move(out));
}

}  // namespace optpipe
