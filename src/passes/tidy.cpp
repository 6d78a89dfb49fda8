// Tidying the search's winner: the recomputes and offloads it no longer needs, taken out.
#include <functional>

#include "optimize/search.h"
#include "optpipe/passes.h"

namespace optpipe {

Tidied drop_needless(const Problem& p, const Schedule& s, int64_t max_evaluations,
                     std::chrono::steady_clock::time_point deadline, const NoiseSamples* noise,
                     const ScheduleRules& rules, Objective objective) {
  const Scoring scoring{objective, noise};
  Tidied out{s, 0, 0};
  Score cur;
  OPTPIPE_CHECK(score_schedule(p, s, &cur, scoring), "a schedule to tidy must simulate");
  int64_t evaluations = 0;
  auto can_go_on = [&] { return evaluations < max_evaluations && std::chrono::steady_clock::now() < deadline; };
  // Keeps `change` (to device d) if the schedule then overflows no more and ends no later.
  auto keep_if_no_worse = [&](int d, const std::function<void(DeviceSchedule&)>& change) {
    Schedule cand = out.schedule;
    change(cand.devices[d]);
    Score sc;
    evaluations++;
    if (!score_schedule(p, cand, &sc, scoring) || sc.overflow_bytes > cur.overflow_bytes ||
        sc.objective_us > cur.objective_us)
      return false;
    cur = sc;
    out.schedule = std::move(cand);
    return true;
  };
  for (int d = 0; d < p.num_devices && !rules.whole_stage_recompute; d++)
    for (int k = static_cast<int>(out.schedule.devices[d].compute.size()) - 1; k >= 0 && can_go_on(); k--)
      if (out.schedule.devices[d].compute[k].kind == OpKind::kR &&
          keep_if_no_worse(d, [k](DeviceSchedule& ds) { ds.compute.erase(ds.compute.begin() + k); }))
        out.recomputes_dropped++;
  for (int d = 0; d < p.num_devices; d++)
    for (int k = static_cast<int>(out.schedule.devices[d].offloads.size()) - 1; k >= 0 && can_go_on(); k--) {
      const Op off = out.schedule.devices[d].offloads[k];
      if (keep_if_no_worse(d, [&](DeviceSchedule& ds) { remove_offload(ds, off.stage, off.microbatch); }))
        out.offloads_dropped++;
    }
  return out;
}

}  // namespace optpipe
