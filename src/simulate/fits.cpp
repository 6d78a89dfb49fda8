// Whether a simulated schedule fits its budgets, at the profile's timings and under any timing;
// and the objective a timeline is judged by.
#include <algorithm>

#include "optpipe/simulate.h"

namespace optpipe {

namespace {

// Every device's peak of this kind (nominal or worst case) within its budget.
bool within_budgets(const Problem& p, const Timeline& t, int64_t DeviceFigures::*peak) {
  for (int d = 0; d < p.num_devices; d++)
    if (t.devices[d].*peak > p.devices[d].mem_budget_bytes) return false;
  return true;
}

}  // namespace

bool fits_budget(const Problem& p, const Timeline& t) { return within_budgets(p, t, &DeviceFigures::peak_bytes); }

bool fits_any_timing(const Problem& p, const Timeline& t) {
  return within_budgets(p, t, &DeviceFigures::worst_peak_bytes);
}

const char* objective_name(Objective o) { return o == Objective::kSpan ? "span" : "makespan"; }

bool parse_objective(const std::string& name, Objective* out) {
  if (name != "makespan" && name != "span") return false;
  *out = name == "span" ? Objective::kSpan : Objective::kMakespan;
  return true;
}

int64_t max_peak(const Timeline& t) {
  int64_t peak = 0;
  for (const DeviceFigures& d : t.devices) peak = std::max(peak, d.peak_bytes);
  return peak;
}

double objective_us(const Timeline& t, Objective o) { return o == Objective::kSpan ? t.max_span_us : t.makespan_us; }

}  // namespace optpipe
