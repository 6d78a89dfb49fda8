#include "optpipe/schedule.h"

#include <cstdlib>
#include <cstring>

namespace optpipe {

static const char* const kKindNames[kNumOpKinds] = {"F", "B", "W", "BW", "R", "OFFLOAD", "RELOAD", "WAIT"};

const char* op_kind_name(OpKind k) { return kKindNames[static_cast<int>(k)]; }

Result<Problem> problem_for(const Problem& p, const Schedule& s) {
  Result<Problem> placed = s.placement == p.placement && s.chunks_per_device == p.chunks_per_device
                               ? Result<Problem>::Of(p)
                               : rechunk(p, s.placement, s.chunks_per_device);
  if (!placed.ok() || s.items_per_stage.empty() || s.items_per_stage == items_per_stage(placed.value)) return placed;
  return with_partition(placed.value, s.items_per_stage);
}

double op_duration_us(const Problem& p, const Op& op) {
  const StageSpec& st = p.stages[op.stage];
  switch (op.kind) {
    case OpKind::kF: return st.t_f_us;
    case OpKind::kB: return st.t_b_us;
    case OpKind::kW: return st.t_w_us;
    case OpKind::kBW: return st.t_b_us + st.t_w_us;
    case OpKind::kR: return st.t_r_us;
    case OpKind::kOffload: return p.offload_us(op.stage);
    case OpKind::kReload: return p.reload_us(op.stage);
    case OpKind::kWait: return 0;
  }
  return 0;
}

std::string op_name(const Op& op) {
  return std::string(op_kind_name(op.kind)) + std::to_string(op.microbatch) + " s" + std::to_string(op.stage);
}

// Parses "<KIND><microbatch> s<stage>", e.g. "BW12 s3".
bool parse_op_name(const std::string& text, Op* out) {
  size_t pos = 0;
  while (pos < text.size() && text[pos] >= 'A' && text[pos] <= 'Z') pos++;
  const std::string kind = text.substr(0, pos);
  int k = 0;
  while (k < kNumOpKinds && kind != kKindNames[k]) k++;
  if (k == kNumOpKinds) return false;
  auto read_int = [&](int* v) {
    size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') pos++;
    if (pos == start || pos - start > 9) return false;
    *v = std::atoi(text.substr(start, pos - start).c_str());
    return true;
  };
  int mb = 0, stage = 0;
  if (!read_int(&mb)) return false;
  if (pos + 2 > text.size() || text[pos] != ' ' || text[pos + 1] != 's') return false;
  pos += 2;
  if (!read_int(&stage) || pos != text.size()) return false;
  *out = Op{static_cast<OpKind>(k), stage, mb};
  return true;
}

size_t Schedule::num_ops() const {
  size_t n = 0;
  for (const DeviceSchedule& d : devices) n += d.compute.size() + d.offloads.size() + d.reloads.size();
  return n;
}

}  // namespace optpipe
