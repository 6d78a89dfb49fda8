#include "report.h"

#include "optpipe/figures.h"

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
