// The optimizer's starts (private to it): every family that applies and greedy list schedules
// under activation limits, each scored by the simulator, offloaded and repaired where it
// overflows, ordered for the race.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "optimize/frugal.h"
#include "optimize/list_scheduler.h"
#include "optimize/search.h"
#include "optpipe/families.h"
#include "optpipe/problem.h"
#include "optpipe/space.h"

namespace optpipe {

inline constexpr const char* kGreedySource = "greedy";
inline constexpr const char* kFrugalSource = "frugal";

struct Start {
  std::string name;    // the family, or the greedy rule, it comes from, and what was done to it
  std::string source;  // what it was made from: a family's name, kGreedySource or kFrugalSource
  FamilySchedule built;
  Score score;
};

// The frugal schedules, the families' runs that apply and keep to the rules (their built
// schedules are moved out; see rule_out), then greedy schedules on the most promising placements
// of `space` until `greedy_deadline` (or a third of the time left before `deadline`, when the
// families took longer), then repairs of those that overflow until `deadline`; the best of each kind
// (placement; split or fused backwards) first, then the rest by score. Empty when nothing
// applies. `out_of_time` is set when a deadline cut the list short.
std::vector<Start> make_starts(const Problem& p, const std::vector<PlacementCandidate>& space,
                               const std::vector<Frugal>& frugal, std::vector<FamilyRun>& runs,
                               const ScheduleRules& rules, Objective objective,
                               std::chrono::steady_clock::time_point greedy_deadline,
                               std::chrono::steady_clock::time_point deadline, bool* out_of_time);

// The greedy list schedule in `order`'s order under per-device byte limits (ListRules::
// max_act_bytes, set here), with `offload_share` of its activations offloaded (add_offloads,
// every 1/share-th whose lifespan covers the round trip): the limits start that share above each
// device's budget and, round by round, move by what the simulated peak left free or overflowed
// (from the third round, only down). A round over the budget is also repaired (repair_memory, as
// `rules` allow), and the repaired schedule competes too: where the limits circle a fit, a round
// one activation over repairs at little cost. The best of at most `rounds` by nominal score; an
// empty schedule when none ran (the deadline passed, or the greedy failed).
struct FilledGreedy {
  Schedule schedule;
  Score score;
  bool repaired = false;  // the best is a repaired round
};
FilledGreedy filled_greedy(const Problem& p, const ListRules& order, double offload_share, int rounds,
                           Objective objective, std::chrono::steady_clock::time_point deadline,
                           const ScheduleRules& rules = {});

// Schedules of more ops than this are repaired every overflow per simulation, not one peak.
constexpr size_t kLargeScheduleOps = 20000;

}  // namespace optpipe
