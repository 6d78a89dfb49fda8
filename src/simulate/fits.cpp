// Whether a simulated schedule fits its budgets, at the profile's timings and under any timing.
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

}  // namespace optpipe
