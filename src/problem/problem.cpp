#include "optpipe/problem.h"

#include "optpipe/schedule.h"  // kNumOpKinds: op ids per stage and microbatch

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace optpipe {

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kLinear: return "linear";
    case Placement::kInterleaved: return "interleaved";
    case Placement::kVShape: return "vshape";
    case Placement::kWave: return "wave";
  }
  return "?";
}

bool parse_placement(const std::string& name, Placement* out) {
  for (Placement p : {Placement::kLinear, Placement::kInterleaved, Placement::kVShape, Placement::kWave}) {
    if (name == placement_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

double Problem::offload_us(int stage) const { return host_link.d2h_us(stages[stage].act_f_bytes); }

double Problem::reload_us(int stage) const { return host_link.h2d_us(stages[stage].act_f_bytes); }

double Problem::work_us(int device) const {
  double us = 0;
  for (int s = 0; s < num_stages(); s++)
    if (device_of(s) == device) us += num_microbatches * (stages[s].t_f_us + stages[s].t_b_us + stages[s].t_w_us);
  return us;
}

int64_t Problem::every_activation_bytes(int device) const {
  int64_t bytes = 0;
  for (int s = 0; s < num_stages(); s++)
    if (device_of(s) == device) bytes += stages[s].act_f_bytes * num_microbatches;
  return bytes;
}

namespace {

// Bytes beyond 1 PiB are certainly a mistake, and keeping them small keeps every sum in range.
constexpr int64_t kMaxBytes = int64_t{1} << 50;
constexpr double kMaxTimeUs = 1e12;
constexpr long kMaxOpIds = 50'000'000;  // simulator arrays are sized by this

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status bad(const std::string& field, const std::string& rule, const std::string& got) {
  return Status::Invalid(field + ": " + rule + ", got " + got);
}

Status check_time(const std::string& field, double v) {
  if (!std::isfinite(v) || v < 0 || v > kMaxTimeUs)
    return bad(field, "must be a finite number of µs in [0, 1e12]", num(v));
  return Status::Ok();
}

Status check_bytes(const std::string& field, int64_t v, bool may_be_negative) {
  if (v > kMaxBytes || v < (may_be_negative ? -kMaxBytes : 0))
    return bad(field, may_be_negative ? "must be within ±2^50 bytes" : "must be in [0, 2^50] bytes", std::to_string(v));
  return Status::Ok();
}

}  // namespace

Status check_problem(const Problem& p) {
  if (p.num_devices < 1 || p.num_devices > 4096)
    return bad("num_devices", "must be in [1, 4096]", std::to_string(p.num_devices));
  if (p.num_microbatches < 1 || p.num_microbatches > 100000)
    return bad("num_microbatches", "must be in [1, 100000]", std::to_string(p.num_microbatches));
  if (p.chunks_per_device < 1 || p.chunks_per_device > 64)
    return bad("chunks_per_device", "must be in [1, 64]", std::to_string(p.chunks_per_device));
  if (p.placement == Placement::kLinear && p.chunks_per_device != 1)
    return bad("chunks_per_device", "must be 1 with placement \"linear\"", std::to_string(p.chunks_per_device));
  if (p.placement == Placement::kVShape && p.chunks_per_device != 2)
    return bad("chunks_per_device", "must be 2 with placement \"vshape\"", std::to_string(p.chunks_per_device));
  const long ids = static_cast<long>(kNumOpKinds) * p.num_stages() * p.num_microbatches;
  if (ids > kMaxOpIds)
    return Status::Invalid("problem too large: " + std::to_string(kNumOpKinds) +
                           " op kinds × stages × microbatches = " + std::to_string(ids) + " exceeds " +
                           std::to_string(kMaxOpIds));
  Status st;
  if (!(st = check_time("t_comm_us", p.t_comm_us)).ok()) return st;

  const int S = p.num_stages();
  if (static_cast<int>(p.stages.size()) != S)
    return bad("stages", "must have num_devices × chunks_per_device = " + std::to_string(S) + " entries",
               std::to_string(p.stages.size()));
  for (int s = 0; s < S; s++) {
    const StageSpec& g = p.stages[s];
    const std::string f = "stages[" + std::to_string(s) + "].";
    if (!(st = check_time(f + "t_f_us", g.t_f_us)).ok()) return st;
    if (!(st = check_time(f + "t_b_us", g.t_b_us)).ok()) return st;
    if (!(st = check_time(f + "t_w_us", g.t_w_us)).ok()) return st;
    if (!(st = check_time(f + "t_r_us", g.t_r_us)).ok()) return st;
    if (!(st = check_bytes(f + "act_f_bytes", g.act_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "act_b_bytes", g.act_b_bytes, true)).ok()) return st;
    if (!(st = check_bytes(f + "act_w_bytes", g.act_w_bytes, true)).ok()) return st;
    if (!(st = check_bytes(f + "act_input_bytes", g.act_input_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_f_bytes", g.ws_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_b_bytes", g.ws_b_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "ws_w_bytes", g.ws_w_bytes, false)).ok()) return st;
    if (g.num_layers < 1 || g.num_layers > 100000)
      return bad(f + "num_layers", "must be 1 to 100000", std::to_string(g.num_layers));
    if (g.recompute_layers < 0 || g.recompute_layers > g.num_layers)
      return bad(f + "recompute_layers", "must be 0 to num_layers (" + std::to_string(g.num_layers) + ")",
                 std::to_string(g.recompute_layers));
    if (g.act_b_bytes > 0 && g.recompute_layers == 0)
      return bad(f + "act_b_bytes", "must be ≤ 0 (B frees memory unless it reruns layers for W)",
                 std::to_string(g.act_b_bytes));
    if (g.act_w_bytes > 0) return bad(f + "act_w_bytes", "must be ≤ 0 (W frees memory)", std::to_string(g.act_w_bytes));
    const int64_t sum = g.act_f_bytes + g.act_b_bytes + g.act_w_bytes;
    if (sum != 0)
      return bad(f + "act_b_bytes", "act_f_bytes + act_b_bytes + act_w_bytes must be 0",
                 "a sum of " + std::to_string(sum));
    if (g.act_input_bytes > g.act_f_bytes)
      return bad(f + "act_input_bytes", "must not exceed act_f_bytes (" + std::to_string(g.act_f_bytes) + ")",
                 std::to_string(g.act_input_bytes));
  }

  if (static_cast<int>(p.devices.size()) != p.num_devices)
    return bad("devices", "must have num_devices = " + std::to_string(p.num_devices) + " entries",
               std::to_string(p.devices.size()));
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceSpec& dev = p.devices[d];
    const std::string f = "devices[" + std::to_string(d) + "].";
    if (!(st = check_bytes(f + "static_bytes", dev.static_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "mem_budget_bytes", dev.mem_budget_bytes, false)).ok()) return st;
    if (dev.host_link < 0 || dev.host_link >= p.num_devices)
      return bad(f + "host_link", "must be in [0, num_devices)", std::to_string(dev.host_link));
  }
  for (size_t k = 0; k < p.layers.size(); k++) {
    const LayerSpec& l = p.layers[k];
    const std::string f = "layers[" + std::to_string(k) + "].";
    if (!(st = check_time(f + "t_f_us", l.t_f_us)).ok()) return st;
    if (!(st = check_time(f + "t_b_us", l.t_b_us)).ok()) return st;
    if (!(st = check_time(f + "t_w_us", l.t_w_us)).ok()) return st;
    if (!(st = check_time(f + "t_r_us", l.t_r_us)).ok()) return st;
    if (!(st = check_bytes(f + "act_f_bytes", l.act_f_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "act_input_bytes", l.act_input_bytes, false)).ok()) return st;
    if (!(st = check_bytes(f + "static_bytes", l.static_bytes, false)).ok()) return st;
    if (l.act_w_bytes > 0 || l.act_w_bytes < -l.act_f_bytes)
      return bad(f + "act_w_bytes", "must be in [-act_f_bytes, 0]", std::to_string(l.act_w_bytes));
    if ((l.kind == LayerKind::kEmbedding && k != 0) || (l.kind == LayerKind::kHead && k + 1 != p.layers.size()))
      return bad(f + "kind", "the embedding comes first and the head last", layer_kind_name(l.kind));
  }
  // Every byte total the simulator forms (static + all activations of a device, summed over
  // devices) must stay far inside int64.
  double total = 0;
  for (const DeviceSpec& dev : p.devices) total += static_cast<double>(dev.static_bytes);
  for (const StageSpec& g : p.stages)
    total += static_cast<double>(p.num_microbatches) *
             static_cast<double>(g.act_f_bytes + g.ws_f_bytes + g.ws_b_bytes + g.ws_w_bytes);
  if (total > 0x1p62)
    return Status::Invalid("problem too large: its bytes (static + activations × microbatches) exceed 2^62");
  const HostLinkSpec& h = p.host_link;
  if (!std::isfinite(h.d2h_gb_per_s) || h.d2h_gb_per_s <= 0 || h.d2h_gb_per_s > 1e6)
    return bad("host_link.d2h_gb_per_s", "must be in (0, 1e6]", num(h.d2h_gb_per_s));
  if (!std::isfinite(h.h2d_gb_per_s) || h.h2d_gb_per_s <= 0 || h.h2d_gb_per_s > 1e6)
    return bad("host_link.h2d_gb_per_s", "must be in (0, 1e6]", num(h.h2d_gb_per_s));
  if (!(st = check_time("host_link.latency_us", h.latency_us)).ok()) return st;
  // Derived durations must be as bounded as given ones: a tiny bandwidth makes a transfer last
  // forever.
  for (int s = 0; s < S; s++) {
    const double off = p.offload_us(s), rel = p.reload_us(s);
    if (!(std::isfinite(off) && off <= kMaxTimeUs))
      return bad("host_link.d2h_gb_per_s",
                 "too slow: offloading stages[" + std::to_string(s) + "]'s " + std::to_string(p.stages[s].act_f_bytes) +
                     " bytes would take more than 1e12 µs",
                 num(h.d2h_gb_per_s));
    if (!(std::isfinite(rel) && rel <= kMaxTimeUs))
      return bad("host_link.h2d_gb_per_s",
                 "too slow: reloading stages[" + std::to_string(s) + "]'s " + std::to_string(p.stages[s].act_f_bytes) +
                     " bytes would take more than 1e12 µs",
                 num(h.h2d_gb_per_s));
  }
  return Status::Ok();
}

Problem make_uniform_problem(const UniformSpec& u) {
  Problem p;
  p.num_devices = u.num_devices;
  p.num_microbatches = u.num_microbatches;
  p.placement = u.placement;
  p.chunks_per_device = u.chunks_per_device;
  p.t_comm_us = u.t_comm_us;
  StageSpec st;
  st.t_f_us = u.t_f_us;
  st.t_b_us = u.t_b_us;
  st.t_w_us = u.t_w_us;
  st.t_r_us = u.t_f_us;
  st.act_f_bytes = u.act_f_bytes;
  st.act_w_bytes = u.act_w_bytes;
  st.act_b_bytes = -u.act_f_bytes - u.act_w_bytes;
  st.act_input_bytes = u.act_input_bytes;
  st.num_layers = u.num_layers;
  p.stages.assign(std::max(0, u.num_devices * u.chunks_per_device), st);
  DeviceSpec dev;
  dev.static_bytes = u.static_bytes;
  dev.mem_budget_bytes = u.mem_budget_bytes;
  p.devices.assign(std::max(0, u.num_devices), dev);
  for (int d = 0; d < u.num_devices; d++) p.devices[d].host_link = d;
  return p;
}

// Four devices, eight microbatches, uniform 10 ms passes and no communication latency, so every
// family's closed form applies.
// Each stage-microbatch keeps 2 GiB of activations (512 MiB of it until W); the 52 GiB budget
// fits 1F1B's four in flight on device 0 (40 GiB static + 8 GiB) but not GPipe's eight.
Problem default_problem() {
  UniformSpec u;
  u.num_devices = 4;
  u.num_microbatches = 8;
  u.t_f_us = u.t_b_us = u.t_w_us = 10000;
  u.act_f_bytes = 4ll << 29;
  u.act_w_bytes = -(1ll << 29);
  u.act_input_bytes = 32ll << 20;
  u.static_bytes = 40ll << 30;
  u.mem_budget_bytes = 52ll << 30;
  Problem p = make_uniform_problem(u);
  p.host_link = {/*d2h_gb_per_s=*/50, /*h2d_gb_per_s=*/50, /*latency_us=*/10};  // PCIe 5.0 x16
  return p;
}

}  // namespace optpipe
