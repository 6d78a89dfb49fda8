#include "tables.h"

#include "optpipe/results_json.h"

#include <algorithm>
#include <cmath>
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
std::string fmt_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
// Columns as printed: UTF-8 continuation bytes take none ("–", "σ" are one each).
size_t text_width(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
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
         placement_name(p.placement) + " placement (" + std::to_string(p.num_stages()) + " stages), budget " + budget +
         " per device";
}

std::string aligned_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); c++) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], text_width(row[c]));
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); c++) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - text_width(row[c]) + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

const char* fits_cell(bool any_timing, bool nominal) { return any_timing ? "yes" : nominal ? "nominal only" : "no"; }

std::string fits_text(const Problem& p, const Timeline& t) {
  if (fits_any_timing(p, t)) return "fits the budget under any timing";
  if (fits_budget(p, t)) return "fits the budget at the profile's timings only (see the worst case)";
  return "OVER BUDGET";
}

std::string timeline_text(const Problem& p, const Timeline& t) {
  std::string out = "makespan " + format_us(t.makespan_us) + ", bubble " + percent(t.bubble_ratio) +
                    ", longest device span " + format_us(t.max_span_us) + ", " + fits_text(p, t) + "\n\n";
  std::vector<std::vector<std::string>> rows = {
      {"device", "busy", "idle", "peak memory", "worst case", "budget", "fits", "offloaded", "recomputes"}};
  for (int d = 0; d < p.num_devices; d++) {
    const DeviceFigures& f = t.devices[d];
    const int64_t budget = p.devices[d].mem_budget_bytes;
    rows.push_back({std::to_string(d), format_us(f.busy_us), format_us(f.idle_us), format_bytes(f.peak_bytes),
                    format_bytes(f.worst_peak_bytes), format_bytes(budget),
                    fits_cell(f.worst_peak_bytes <= budget, f.peak_bytes <= budget), format_bytes(f.offload_bytes),
                    std::to_string(f.num_recomputes)});
  }
  out += aligned_table(rows);
  if (fits_budget(p, t) && !fits_any_timing(p, t))
    out +=
        "worst case: the peak if offloads run late and reloads start early within the schedule's own "
        "orders; a WAIT or a reload's `after` bounds it (optpipe optimize adds them)\n";
  return out;
}

std::string noise_text(const Problem& p, const NoiseSpec& spec, const NoiseReport& r) {
  std::string out = "noise: " + std::to_string(r.samples) + " samples, per-op jitter σ " +
                    fmt_number(spec.jitter_sigma) + ", profile error σ " + fmt_number(spec.profile_sigma) + ", seed " +
                    std::to_string(spec.seed) + "\n";
  if (std::isnan(r.mean_makespan_us))
    out += "  makespan: no sample finished\n";
  else
    out += "  makespan: mean " + format_us(r.mean_makespan_us) + ", p50 " + format_us(r.p50_makespan_us) + ", p95 " +
           format_us(r.p95_makespan_us) + "\n";
  out += "  over budget as planned (out of memory on a GPU): " + std::to_string(r.overflowed) + " of " +
         std::to_string(r.samples) + "; stuck waiting for room: " + std::to_string(r.stuck) + "\n";
  std::string peaks;
  for (int d = 0; d < p.num_devices; d++) {
    if (d) peaks += ' ';
    peaks += format_bytes(r.worst_peak_bytes[d]);
  }
  return out + "  largest peak per device: " + peaks + "\n";
}

}  // namespace optpipe
