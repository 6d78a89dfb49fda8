// families.h — the published schedules, as functions problem → schedule.
//
// One table lists every family for the CLI, the tests and the docs. A family fixes the placement
// it runs on (1F1B is linear, ZB-V is V-shaped, ...); build_family() re-cuts the problem's model
// to that placement (see rechunk) and returns the problem it actually scheduled with the schedule.
// A family that cannot handle a problem (e.g. DualPipeV with too few microbatches) says why.
//
//   for (const Family& f : families()) {
//     Result<FamilySchedule> r = build_family(f, problem);
//     if (r.ok()) simulate(r.value.problem, r.value.schedule);
//   }
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/schedule_rules.h"
#include "optpipe/simulate.h"
#include "optpipe/status.h"

namespace optpipe {

using FamilyFn = Result<Schedule> (*)(const Problem& p);

struct Family {
  const char* name;         // "1f1b", "zb-h1", ...
  Placement placement;      // the placement it schedules
  int chunks_per_device;    // v it uses (for interleaved, the default of any it takes)
  FamilyFn make;            // expects a problem already in that placement
  const char* description;  // one line: what it trades
  // Whether it runs at any chunk count (the looped ones), not only its own.
  bool takes_any_chunks() const { return placement == Placement::kInterleaved; }
};

const std::vector<Family>& families();
const Family* find_family(const std::string& name);

struct FamilySchedule {
  Problem problem;  // the input re-cut to the family's placement
  Schedule schedule;
};

// chunks_per_device: for families that accept any v (interleaved); 0 picks the family's default.
Result<FamilySchedule> build_family(const Family& f, const Problem& p, int chunks_per_device = 0);

// How a family is run: as published, or fitted to the budget the way its users fit it when it
// does not fit as published.
enum class Tuning {
  kAsPublished,
  kRecompute,  // + Megatron's selective recompute: on each stage the fewest layers that fit
               //   (built.problem's recompute_layers, with_recompute_layers)
  kOffload,    // + PipeOffload's uniform offload ratio: the smallest in tenths that fits
  kPartition,  // on a practitioners' partition (Megatron's even split, or with the embedding and
               //   head counted as layers: torchtitan's default), the faster that fits, when it
               //   fits where the balanced cut does not or beats it (a problem from the cost model)
};

// Every family on one problem, each validated (not against the budget) and simulated.
struct FamilyRun {
  const Family* family = nullptr;
  Tuning tuning = Tuning::kAsPublished;
  std::string label;            // "zb-v", "zb-v +recompute 3/5 layers", "pipeoffload v4 +offload 40%"
  double offload_fraction = 0;  // kOffload: the ratio
  Status status;                // not ok: the family does not apply to this problem (the reason)
  FamilySchedule built;
  Timeline timeline;
  bool fits = false;             // every device's peak within its budget
  bool fits_any_timing = false;  // ... and its worst case over every timing (any_timing.h)
};
// Every family, built, validated and simulated: the interleaved ones at each of `interleaved_chunks`
// chunks per device (empty: every count from 2 to what the items fill, max_chunks_per_device — the
// grid practitioners tune Megatron's virtual pipeline size over), labelled with it ("pipeoffload v5").
// A family not started by `deadline` comes back with a status saying so.
// Each family that applies, overflows as published and neither recomputes nor offloads already is
// followed by its practitioner tunings that fit (Tuning; none when none fits). Every family is
// built before any tuning; a tuning not started by `tunings_deadline` (or `deadline`) is left out.
// The share of a time limit within which the optimizer and `plan` start practitioner tunings.
constexpr double kTuningsShareOfLimit = 0.4;
std::vector<FamilyRun> run_families(
    const Problem& p, const SimOptions& sim,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    const std::vector<int>& interleaved_chunks = {},
    std::chrono::steady_clock::time_point tunings_deadline = std::chrono::steady_clock::time_point::max());

// As run_families, for the families of q's own placement only (and of its chunk count), each on
// q's cut as it is: the families on a cut that no partition rule gives.
std::vector<FamilyRun> run_families_on_cut(
    const Problem& q, const SimOptions& sim,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    std::chrono::steady_clock::time_point tunings_deadline = std::chrono::steady_clock::time_point::max());

// The fastest run that fits (with as_published_only, among the runs as published), or nullptr.
const FamilyRun* fastest_fitting(const std::vector<FamilyRun>& runs, Objective objective = Objective::kMakespan,
                                 bool as_published_only = false);
// Marks the runs whose schedules the rules forbid, or whose placement and chunk count lie outside
// the space searched (placement_space), as not applicable, the reason saying which.
struct PlacementCandidate;
void rule_out(const ScheduleRules& rules, const std::vector<PlacementCandidate>& space, std::vector<FamilyRun>* runs);

// The family functions, one file each.
Result<Schedule> make_gpipe(const Problem& p);
Result<Schedule> make_1f1b(const Problem& p);
Result<Schedule> make_interleaved_1f1b(const Problem& p);
Result<Schedule> make_looped_bfs(const Problem& p);
Result<Schedule> make_interleaved_zb(const Problem& p);
Result<Schedule> make_zb_h1(const Problem& p);
Result<Schedule> make_zb_h2(const Problem& p);
Result<Schedule> make_zb_auto(const Problem& p);
Result<Schedule> make_zb_v(const Problem& p);
Result<Schedule> make_v_half(const Problem& p);
Result<Schedule> make_v_min(const Problem& p);
Result<Schedule> make_dualpipe_v(const Problem& p);
Result<Schedule> make_pipeoffload(const Problem& p);
Result<Schedule> make_1f1b_recompute(const Problem& p);

}  // namespace optpipe
