#include "report.h"

#include <algorithm>
#include <cstdio>

#include "optpipe/schedule.h"
#include "optpipe/units.h"

namespace optpipe {

namespace {
std::string percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * ratio);
  return buf;
}
}  // namespace

std::string problem_summary(const Problem& p) {
  int64_t lo = p.devices.empty() ? 0 : p.devices[0].mem_budget_bytes, hi = lo;
  for (const DeviceSpec& d : p.devices) {
    lo = std::min(lo, d.mem_budget_bytes);
    hi = std::max(hi, d.mem_budget_bytes);
  }
  std::string budget = lo == hi ? format_bytes(lo) : format_bytes(lo) + " to " + format_bytes(hi);
  return std::to_string(p.num_devices) + " devices, " + std::to_string(p.num_microbatches) + " microbatches, " +
         placement_name(p.placement) + " placement (" + std::to_string(p.num_stages()) + " stages), budget " +
         budget + " per device";
}

nlohmann::json problem_summary_json(const Problem& p) {
  nlohmann::json budgets = nlohmann::json::array();
  for (const DeviceSpec& d : p.devices) budgets.push_back(d.mem_budget_bytes);
  return {{"num_devices", p.num_devices},
          {"num_microbatches", p.num_microbatches},
          {"placement", placement_name(p.placement)},
          {"chunks_per_device", p.chunks_per_device},
          {"num_stages", p.num_stages()},
          {"mem_budget_bytes", budgets}};
}

bool fits_budget(const Problem& p, const Timeline& t) {
  for (int d = 0; d < p.num_devices; d++)
    if (t.devices[d].peak_bytes > p.devices[d].mem_budget_bytes) return false;
  return true;
}

nlohmann::json timeline_json(const Problem& p, const Timeline& t) {
  nlohmann::json devices = nlohmann::json::array();
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceFigures& f = t.devices[d];
    devices.push_back({{"device", d},
                       {"busy_us", f.busy_us},
                       {"idle_us", f.idle_us},
                       {"first_start_us", f.first_start_us},
                       {"last_end_us", f.last_end_us},
                       {"peak_bytes", f.peak_bytes},
                       {"peak_time_us", f.peak_time_us},
                       {"peak_op", op_name(f.peak_op)},
                       {"mem_budget_bytes", p.devices[d].mem_budget_bytes},
                       {"fits_budget", f.peak_bytes <= p.devices[d].mem_budget_bytes},
                       {"offload_bytes", f.offload_bytes},
                       {"reload_bytes", f.reload_bytes},
                       {"d2h_busy_us", f.d2h_busy_us},
                       {"h2d_busy_us", f.h2d_busy_us},
                       {"recomputes", f.num_recomputes}});
  }
  return {{"makespan_us", t.makespan_us},
          {"max_span_us", t.max_span_us},
          {"bubble_ratio", t.bubble_ratio},
          {"fits_budget", fits_budget(p, t)},
          {"devices", devices}};
}

std::string aligned_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); c++) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); c++) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string timeline_text(const Problem& p, const Timeline& t) {
  std::string out = "makespan " + format_us(t.makespan_us) + ", bubble " + percent(t.bubble_ratio) +
                    ", longest device span " + format_us(t.max_span_us) + ", " +
                    (fits_budget(p, t) ? "fits the budget" : "OVER BUDGET") + "\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"device", "busy", "idle", "peak memory", "budget", "fits", "offloaded", "recomputes"}};
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceFigures& f = t.devices[d];
    rows.push_back({std::to_string(d), format_us(f.busy_us), format_us(f.idle_us), format_bytes(f.peak_bytes),
                    format_bytes(p.devices[d].mem_budget_bytes),
                    f.peak_bytes <= p.devices[d].mem_budget_bytes ? "yes" : "no", format_bytes(f.offload_bytes),
                    std::to_string(f.num_recomputes)});
  }
  return out + aligned_table(rows);
}

}  // namespace optpipe
