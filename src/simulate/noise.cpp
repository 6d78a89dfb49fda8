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
    return Status::Invalid("noise: the profile-error sigma must be in [0, 2], got " +
                           std::to_string(spec.profile_sigma));
  if (spec.samples < 1 || spec.samples > 1000000)
    return Status::Invalid("noise: samples must be in [1, 1000000], got " + std::to_string(spec.samples));
  return Status::Ok();
}

NoiseSampler::NoiseSampler(const Problem& p, const NoiseSpec& spec) : p_(p), spec_(spec) {}

namespace {

// Standard normal draws, the same on every platform (std::normal_distribution is not): splitmix64
// for the bits, Box–Muller for the shape. Fast enough to draw every op of a large problem per
// sample.
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;  // in (0, 1)
    const double u2 = static_cast<double>(next() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2 * std::log(u1)), a = 2 * M_PI * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

void NoiseSampler::draw(int sample, std::vector<double>* factors) const {
  // One stream per sample: sample k draws the same numbers whatever was drawn before it.
  Normal z(spec_.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(sample) * 0xd1b54a32d192ed03ull + 1);
  auto lognormal = [&](double sigma) { return sigma > 0 ? std::exp(sigma * z() - sigma * sigma / 2) : 1.0; };
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
      for (int i = 0; i < M; i++) {
        double& f = (*factors)[op_id(S, M, Op{static_cast<OpKind>(kind), s, i})];
        f = kind == static_cast<int>(OpKind::kWait) ? 1.0
                                                    : common * lognormal(spec_.jitter_sigma);  // a WAIT takes no time
      }
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
  out.mean_makespan_us =
      makespans.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(makespans.size());
  out.p50_makespan_us = quantile(makespans, 0.5);
  out.p95_makespan_us = quantile(makespans, 0.95);
  return Result<NoiseReport>::Of(std::move(out));
}

}  // namespace optpipe
