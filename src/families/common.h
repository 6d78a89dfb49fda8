// Helpers shared by the family files (private to the library).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "optpipe/families.h"

namespace optpipe {

// An empty schedule for p: one DeviceSchedule per device, p's placement.
inline Schedule empty_schedule(const Problem& p) {
  Schedule s;
  s.placement = p.placement;
  s.chunks_per_device = p.chunks_per_device;
  s.devices.resize(p.num_devices);
  return s;
}

// Invalid status unless p has the given placement (and v, when v > 0).
inline Status require_placement(const Problem& p, const char* family, Placement placement, int v) {
  if (p.placement != placement || (v > 0 && p.chunks_per_device != v))
    return Status::Invalid(std::string(family) + " schedules placement " + placement_name(placement) +
                           (v > 0 ? " with " + std::to_string(v) + " chunk(s) per device" : "") + ", not " +
                           placement_name(p.placement) + " with " + std::to_string(p.chunks_per_device));
  return Status::Ok();
}

// Validates run->built (not against the budget), simulates it and fills the run's timeline and fits.
void score_run(const SimOptions& sim, FamilyRun* run);

// The practitioner tunings of a run as published that overflows (practitioner.cpp): each one that
// fits, or none.
std::vector<FamilyRun> practitioner_runs(const FamilyRun& published, const SimOptions& sim,
                                         std::chrono::steady_clock::time_point deadline);

inline Op F(int stage, int mb) { return Op{OpKind::kF, stage, mb}; }
inline Op B(int stage, int mb) { return Op{OpKind::kB, stage, mb}; }
inline Op W(int stage, int mb) { return Op{OpKind::kW, stage, mb}; }
inline Op BW(int stage, int mb) { return Op{OpKind::kBW, stage, mb}; }
inline Op R(int stage, int mb) { return Op{OpKind::kR, stage, mb}; }

}  // namespace optpipe
