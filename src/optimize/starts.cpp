// The optimizer's starts: families, greedy list schedules, their offloaded, settled and repaired
// twins.
#include "optimize/starts.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "optimize/list_scheduler.h"
#include "optimize/partition.h"
#include "optpipe/optimize.h"
#include "optpipe/passes.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSettleRounds = 64;        // simulations to hold a start's transfers until it fits
constexpr size_t kGreedyPlacements = 4;  // placements of the space the greedy starts are made on

// A start, scored; when it overflows the budget (and there is time), also the same order with
// every activation offloaded whose lifespan covers the round trip, which often fits outright,
// with reloads issued two and four reload times ahead (the later ones wait less on a busy link).
// `scored`: its score when it has been simulated already.
void add_start(const std::string& name, const std::string& source, FamilySchedule built, const ScheduleRules& rules,
               const Scoring& scoring, Clock::time_point deadline, std::vector<Start>* starts,
               const Score* scored = nullptr) {
  Score sc;
  if (scored)
    sc = *scored;
  else if (!score_schedule(built.problem, built.schedule, &sc, scoring))
    return;
  for (int lead : {2, 4}) {
    if (sc.overflow_bytes == 0 || !rules.offload || Clock::now() > deadline) break;
    Schedule offloaded = add_offloads(built.problem, built.schedule, lead);
    Score os;
    if (score_schedule(built.problem, offloaded, &os, scoring) && os < sc)
      starts->push_back(
          {name + " +offload" + (lead == 2 ? "" : "(lead 4)"), source, {built.problem, std::move(offloaded)}, os});
  }
  starts->push_back({name, source, std::move(built), sc});
}

std::string greedy_name(const PlacementCandidate& pl) {
  return "greedy " + placement_label(pl.placement, pl.chunks_per_device);
}

// The placements of the space the greedy starts are made on, the most promising first: on each,
// a short byte-limited greedy (a quarter offloaded where offloads are allowed; a start too), scored
// beside the best family or frugal start already on it; then the best half of `most` of them and
// the rest by the least lower bound (lower_bound_for on the placement's cut). On a large space the
// full set of greedy starts on every placement would take the starts' whole time on the first few.
std::vector<const PlacementCandidate*> promising_placements(const std::vector<PlacementCandidate>& space,
                                                            const ScheduleRules& rules, const Scoring& scoring,
                                                            size_t most, Clock::time_point deadline,
                                                            std::vector<Start>* starts) {
  std::vector<std::pair<Score, const PlacementCandidate*>> scored;
  for (const PlacementCandidate& pl : space) {
    Score best;
    best.overflow_bytes = std::numeric_limits<double>::infinity();
    for (const Start& st : *starts)
      if (same_placement(st.built.problem, pl.problem) && st.score < best) best = st.score;
    if (space.size() > most && Clock::now() < deadline) {
      const bool reserve = pl.chunks_per_device > 1;
      FilledGreedy quick = filled_greedy(pl.problem, {.reserve_later_chunks = reserve}, rules.offload ? 0.25 : 0, 3,
                                         scoring.objective, deadline, rules);
      if (!quick.schedule.devices.empty()) {
        if (quick.score < best) best = quick.score;
        // A start of its own too (the screen's time is not lost).
        add_start(greedy_name(pl) + " screened" + (reserve ? " reserved" : "") + (rules.offload ? " +offload 25%" : ""),
                  kGreedySource, {pl.problem, std::move(quick.schedule)}, rules, scoring, deadline, starts,
                  &quick.score);
      }
    }
    scored.push_back({best, &pl});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const PlacementCandidate*> out;
  for (size_t k = 0; k < scored.size() && k < (most + 1) / 2; k++) out.push_back(scored[k].second);
  // The rest by their lower bound: a short greedy can misjudge a placement (h-d16-m32-tight-comm:
  // wave v4 screened at 5.92 s, last but one, has the least bound, 4.54 s, and its greedy starts
  // reach 4.59 s where the answer on the screen's four was 4.73 s).
  std::vector<std::pair<double, const PlacementCandidate*>> by_bound;
  for (size_t k = out.size(); k < scored.size(); k++)
    by_bound.push_back({lower_bound_for(scored[k].second->problem, true, scoring.objective, rules), scored[k].second});
  std::stable_sort(by_bound.begin(), by_bound.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < by_bound.size() && out.size() < most; k++) out.push_back(by_bound[k].second);
  return out;
}

// Greedy list schedules limited by each device's budget in bytes rather than by a count of
// activations (filled_greedy): a count treats every activation as whole until its W, and a
// reservation for a microbatch's later chunks as held, so a device's real peak stays below its
// limit. Where offloads are allowed, also with a quarter and half of the activations offloaded:
// the greedy then runs as far ahead as the offloads make room for (D = 64, M = 512: 15.98 s with
// a quarter against 16.2 s without; h-d32-m64-1f1b-comm: 9.615 s with half, 9.682 s when half came
// only in the second round, which its 10 s did not reach). Then, on every placement again while
// there is time, an eighth and all of them offloaded (u-d8-m32-tight-scarce, 4 activations of
// room and a slow link: 4.08 s with all, 4.11 s before). Each backward-first (1F1B's rule) and
// forward-first: the latter runs as far ahead as the limits let it, so the last microbatches'
// forwards are not left behind the backwards (h-d32-m64-1f1b-comm, interleaved v4: 9.408 s against
// 9.615 s, whose end was four drains of the chunks' backwards after the last forward).
void add_filled_greedy_starts(const std::vector<const PlacementCandidate*>& placed, const ScheduleRules& rules,
                              const Scoring& scoring, Objective objective, Clock::time_point deadline,
                              bool* out_of_time, std::vector<Start>* starts) {
  constexpr int kFillRounds = 8;  // D = 64, M = 128: the sixth round repaired best
  for (const std::vector<double>& offload_shares : {std::vector<double>{0, 0.25, 0.5}, {0.125, 1}})
    for (const PlacementCandidate* candidate : placed) {
      const PlacementCandidate& pl = *candidate;
      for (bool reserve : {false, true}) {
        if (reserve && pl.chunks_per_device == 1) continue;  // one chunk per device: nothing to reserve
        // Without reservations a V-shape's (a wave's) devices fill up with first chunks where the
        // budget binds.
        if (!reserve && (pl.placement == Placement::kVShape || pl.placement == Placement::kWave)) continue;
        for (bool backward_first : {true, false})
          for (double offload_share : offload_shares) {
            if (offload_share > 0 && !rules.offload) continue;
            if (Clock::now() > deadline) {
              *out_of_time = true;
              return;
            }
            FilledGreedy filled =
                filled_greedy(pl.problem, {.backward_first = backward_first, .reserve_later_chunks = reserve},
                              offload_share, kFillRounds, objective, deadline, rules);
            if (filled.schedule.devices.empty()) continue;
            const int percent = static_cast<int>(std::lround(100 * offload_share));
            add_start(greedy_name(pl) + " filled" + (reserve ? " reserved" : "") +
                          (backward_first ? "" : " forward-first") +
                          (percent > 0 ? " +offload " + std::to_string(percent) + "%" : "") +
                          (filled.repaired ? " +repair" : ""),
                      kGreedySource, {pl.problem, std::move(filled.schedule)}, rules, scoring, deadline, starts,
                      &filled.score);
          }
      }
    }
}

// Greedy list schedules on the common placements, under activation limits from what an
// unconstrained pipeline keeps down to one per device, a quarter apart: starts for every budget
// in between. Where a device holds several chunks, each limit with and without slots reserved for
// a microbatch's later chunks (neither is better everywhere). The largest limits come first, on
// every placement, as they are the fastest once offloaded.
void add_greedy_starts(const std::vector<const PlacementCandidate*>& placed, const Problem& p,
                       const ScheduleRules& rules, const Scoring& scoring, Clock::time_point deadline,
                       bool* out_of_time, std::vector<Start>* starts) {
  std::vector<std::vector<int>> limits(placed.size());  // per placement, descending
  size_t most_limits = 0;
  for (size_t j = 0; j < placed.size(); j++) {
    const int v = placed[j]->chunks_per_device;
    const int most = std::min(p.num_microbatches * v, 2 * p.num_devices * v);
    for (int k = 1;; k = std::min(most, k + std::max(1, k / 4))) {
      limits[j].insert(limits[j].begin(), k);
      if (k == most) break;
    }
    most_limits = std::max(most_limits, limits[j].size());
  }
  for (size_t i = 0; i < most_limits; i++) {
    for (size_t j = 0; j < placed.size(); j++) {
      const PlacementCandidate& pl = *placed[j];
      if (i >= limits[j].size()) continue;
      for (bool reserve : {false, true}) {
        if (reserve && pl.chunks_per_device == 1) continue;  // one chunk per device: nothing to reserve
        for (bool split : {true, false}) {
          if (Clock::now() > deadline) {
            *out_of_time = true;
            return;
          }
          ListRules list_rules;
          list_rules.max_live.assign(p.num_devices, limits[j][i]);
          list_rules.split_backward = split;
          list_rules.reserve_later_chunks = reserve;
          Result<Schedule> s = list_schedule(pl.problem, list_rules);
          if (!s.ok()) continue;
          add_start(greedy_name(pl) + " live≤" + std::to_string(limits[j][i]) + (reserve ? " reserved" : "") +
                        (split ? "" : " fused"),
                    kGreedySource, {pl.problem, std::move(s.value)}, rules, scoring, deadline, starts);
        }
      }
    }
  }
}

// Where no start fits yet: each placement's frugal start (the leanest schedule there; of its
// variants the least overflowing) also on a partition that moves layers off its overflowing
// devices, the placements whose devices lack the fewest bytes in all (their peaks less their
// budgets, summed: what moving layers cannot create) first. With the partition free a
// placement's frugal schedule may fit only once layers move, and the raced set (the best start of
// each kind) could leave it out by rank: llama2-13b on bench_coverage's per-device ladder (share
// 0.25) said "nothing fits" while wave v4's frugal schedule, among the most overflowing, fitted
// after six layers moved.
void add_repartitioned_frugal_starts(const ScheduleRules& rules, const Scoring& scoring, Clock::time_point deadline,
                                     std::vector<Start>* starts) {
  constexpr int64_t kMoveEvaluations = 3000;  // each: wave v4 above took 870, the V-shape 1,900
  if (rules.fixed_partition) return;
  std::map<std::string, size_t> leanest;  // per placement, the least overflowing frugal start
  for (size_t i = 0; i < starts->size(); i++) {
    const Start& st = (*starts)[i];
    if (st.score.overflow_bytes == 0) return;
    if (st.source != kFrugalSource || !layers_match(st.built.problem)) continue;
    const std::string where = placement_label(st.built.problem.placement, st.built.problem.chunks_per_device);
    auto [it, added] = leanest.emplace(where, i);
    if (!added && st.score < (*starts)[it->second].score) it->second = i;
  }
  std::vector<std::pair<double, size_t>> by_net_excess;
  for (const auto& [where, i] : leanest) {
    const Start& st = (*starts)[i];
    const SimResult sim = simulate(st.built.problem, st.built.schedule);
    if (!sim.ok()) continue;
    double excess = 0;
    for (int d = 0; d < st.built.problem.num_devices; d++)
      excess += static_cast<double>(sim.timeline.devices[d].peak_bytes - st.built.problem.devices[d].mem_budget_bytes);
    by_net_excess.push_back({excess, i});
  }
  std::sort(by_net_excess.begin(), by_net_excess.end());
  for (const auto& [excess, i] : by_net_excess) {
    if (Clock::now() > deadline) return;
    const Start& frugal = (*starts)[i];
    Repartitioned moved = improve_partition(frugal.built.problem, frugal.built.schedule, frugal.score, scoring,
                                            kMoveEvaluations, deadline);
    if (moved.moves == 0) continue;
    const bool fits = moved.score.overflow_bytes == 0;
    starts->push_back(
        {frugal.name + " +partition", frugal.source, {std::move(moved.problem), frugal.built.schedule}, moved.score});
    if (fits) return;
  }
}

// The starts that still overflow, the fastest first, until the deadline: the same order with
// its transfers held until there is room, if that fits; and with activations offloaded or
// recomputed at every remaining peak.
void add_repaired_starts(const ScheduleRules& rules, const Scoring& scoring, Clock::time_point deadline,
                         bool* out_of_time, std::vector<Start>* starts) {
  std::vector<size_t> over;
  for (size_t i = 0; i < starts->size(); i++)
    if ((*starts)[i].score.overflow_bytes > 0) over.push_back(i);
  std::stable_sort(over.begin(), over.end(), [&](size_t a, size_t b) {
    return (*starts)[a].score.objective_us < (*starts)[b].score.objective_us;
  });
  // Round robin over the sources (each family, the greedy and the frugal schedules), each's
  // fastest first: one source's many fast starts must not take the repairs' time from the
  // others (u-d16-m16-1f1b at its proven minimum, 2 s: interleaved-zb's runs and tunings took it
  // all, and the answer fell from looped-bfs's repair, 3.05 s, to the frugal schedule's 30.5 s;
  // paper-gpt7b: a family's offloaded twin, the best start there, came after a hundred greedy
  // ones, or not at all when the time ran out first).
  std::map<std::string, int> seen;  // per source, its starts ranked so far
  std::vector<std::pair<int, size_t>> by_rank;
  for (size_t i : over) by_rank.push_back({seen[(*starts)[i].source]++, i});
  std::stable_sort(by_rank.begin(), by_rank.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < by_rank.size(); k++) over[k] = by_rank[k].second;
  for (size_t i : over) {
    if (Clock::now() > deadline) {
      *out_of_time = true;
      return;
    }
    // With offloads, first without any change of fate: an F, R or reload that overflows waits
    // for an offload in flight to make room (WAIT, `after`), or a reload for the compute op
    // running, or is issued later. If that fits, it is a start; if it only overflows less, it
    // is repaired too, beside the original.
    std::vector<Start> to_repair;
    to_repair.push_back((*starts)[i]);
    if (has_offloads(to_repair[0].built.schedule) && to_repair[0].built.schedule.num_ops() <= kLargeScheduleOps) {
      Start settled{to_repair[0].name + " +settle", to_repair[0].source, to_repair[0].built, {}};
      const bool fits = settle_transfers(settled.built.problem, kSettleRounds, &settled.built.schedule);
      if (score_schedule(settled.built.problem, settled.built.schedule, &settled.score, scoring) &&
          settled.score < to_repair[0].score)
        (fits ? *starts : to_repair).push_back(std::move(settled));
    }
    // Every activation to the host, held by the runtime's rule where the budget binds.
    if (rules.offload && to_repair[0].built.schedule.num_ops() <= kLargeScheduleOps)
      for (int lead : {1, 3}) {
        Result<Schedule> held = hold_to_budget(to_repair[0].built.problem, to_repair[0].built.schedule, lead);
        Start start{to_repair[0].name + " +hold" + (lead == 1 ? "" : "(lead 3)"),
                    to_repair[0].source,
                    {to_repair[0].built.problem, {}},
                    {}};
        if (!held.ok()) continue;
        start.built.schedule = std::move(held.value);
        if (score_schedule(start.built.problem, start.built.schedule, &start.score, scoring))
          starts->push_back(std::move(start));
      }
    for (const Start& st : to_repair) {
      const int max_rounds = 4 * st.built.problem.num_microbatches;  // simulations
      // Fixing one peak per simulation needs too many simulations of a large schedule to finish
      // in the time limit (D=32, M=256: ~90% of 10 s); there every overflow is fixed per round.
      const bool every_overflow = st.built.schedule.num_ops() > kLargeScheduleOps;
      Start repaired{st.name + " +repair",
                     st.source,
                     {st.built.problem,
                      repair_memory(st.built.problem, st.built.schedule, max_rounds, every_overflow, deadline, rules)},
                     {}};
      if (score_schedule(repaired.built.problem, repaired.built.schedule, &repaired.score, scoring) &&
          repaired.score < st.score)
        starts->push_back(std::move(repaired));
    }
  }
}

// The best start of each kind (placement; split or fused backwards) first, then the rest: how
// well a start scores says little of how far the search takes it, and one kind's offloaded and
// repaired twins must not crowd the others out of the search.
void order_by_kind(std::vector<Start>& starts) {
  std::vector<Start> firsts, rest;
  std::set<std::string> kinds;
  for (Start& st : starts) {
    bool fused = false;
    for (const DeviceSchedule& ds : st.built.schedule.devices)
      for (const Op& op : ds.compute) fused = fused || op.kind == OpKind::kBW;
    const std::string kind =
        placement_label(st.built.problem.placement, st.built.problem.chunks_per_device) + (fused ? " fused" : " split");
    (kinds.insert(kind).second ? firsts : rest).push_back(std::move(st));
  }
  for (Start& st : rest) firsts.push_back(std::move(st));
  starts = std::move(firsts);
}

}  // namespace

FilledGreedy filled_greedy(const Problem& p, const ListRules& order, double offload_share, int rounds,
                           Objective objective, Clock::time_point deadline, const ScheduleRules& rules) {
  constexpr double kReloadLead = 2;  // reload times ahead of the backward
  ListRules list_rules = order;
  list_rules.max_act_bytes.clear();
  for (const auto& dev : p.devices)
    list_rules.max_act_bytes.push_back((1 + offload_share) *
                                       static_cast<double>(dev.mem_budget_bytes - dev.static_bytes));
  FilledGreedy best;
  for (int round = 0; round < rounds && Clock::now() <= deadline; round++) {
    Result<Schedule> s = list_schedule(p, list_rules);
    if (!s.ok()) break;
    if (offload_share > 0) s.value = add_offloads(p, s.value, kReloadLead, offload_share);
    SimResult sim = simulate(p, s.value, {.op_times = false, .any_timing = false});
    if (!sim.ok()) break;
    const Score sc = score_of(p, sim.timeline, objective);
    // D = 64, M = 128, a quarter offloaded: every round over on 1–8 devices by an activation or
    // less, and repaired 4.45–5.67 s (the answer at 60 s: 4.595 -> 4.447 s).
    if (sc.overflow_bytes > 0 && Clock::now() <= deadline) {
      const bool every_overflow = s.value.num_ops() > kLargeScheduleOps;
      Schedule repaired = repair_memory(p, s.value, 4 * p.num_microbatches, every_overflow, deadline, rules);
      Score repaired_score;
      if (score_schedule(p, repaired, &repaired_score, {objective, nullptr}) &&
          (best.schedule.devices.empty() || repaired_score < best.score))
        best = {std::move(repaired), repaired_score, true};
    }
    if (best.schedule.devices.empty() || sc < best.score) best = {std::move(s.value), sc, false};
    // After two rounds a limit only comes down: raised and lowered alike, the limits can go round
    // a fit without landing on it (D = 32, M = 128, a quarter offloaded: over on 1–3 devices in
    // every round after the first; lowered only: fits from the fifth, 4.165 s).
    bool moved = false;
    for (int d = 0; d < p.num_devices; d++) {
      const int64_t slack = p.devices[d].mem_budget_bytes - sim.timeline.devices[d].peak_bytes;
      if (round >= 2 && slack > 0) continue;
      list_rules.max_act_bytes[d] += static_cast<double>(slack);
      moved = moved || slack != 0;
    }
    if (!moved) break;
  }
  return best;
}

std::vector<Start> make_starts(const Problem& p, const std::vector<PlacementCandidate>& space,
                               const std::vector<Frugal>& frugal, std::vector<FamilyRun>& runs,
                               const ScheduleRules& rules, Objective objective, Clock::time_point greedy_deadline,
                               Clock::time_point deadline, bool* out_of_time) {
  const Scoring scoring{objective, nullptr};
  std::vector<Start> starts;
  for (const Frugal& f : frugal) add_start(f.name, kFrugalSource, f.built, rules, scoring, deadline, &starts);
  for (FamilyRun& run : runs)
    if (run.status.ok() && run.tuning != Tuning::kRecompute) {  // a recompute tuning re-configures the model
      const Score scored = score_of(run.built.problem, run.timeline, objective);
      add_start(run.label, run.family->name, std::move(run.built), rules, scoring, deadline, &starts, &scored);
    }
  *out_of_time = Clock::now() > deadline;
  // The byte-limited ones first, but with a quarter of the time left for greedy starts: on a large
  // problem the count-limited ones would use it all, and on a smaller one they find what these miss.
  // They end at greedy_deadline or a third of the way to the repairs' deadline, whichever is
  // later: the families may have taken their share (h-d32-m256-tight-comm-shared at 10 s, the
  // families to 2.5 s: no count-limited greedy start was made, the answer a family's 36.29 s;
  // with the third, greedy interleaved v4's 33.53 s). The placements screened first take a tenth.
  const Clock::time_point greedy_until = std::max(greedy_deadline, Clock::now() + (deadline - Clock::now()) / 3);
  const Clock::time_point screen_deadline = Clock::now() + (greedy_until - Clock::now()) / 10;
  const std::vector<const PlacementCandidate*> placed =
      promising_placements(space, rules, scoring, kGreedyPlacements, screen_deadline, &starts);
  const Clock::time_point filled_deadline = Clock::now() + (greedy_until - Clock::now()) / 4;
  if (!*out_of_time) add_filled_greedy_starts(placed, rules, scoring, objective, filled_deadline, out_of_time, &starts);
  *out_of_time = Clock::now() > deadline;  // their own deadline cutting them short is not the caller's
  if (!*out_of_time) add_greedy_starts(placed, p, rules, scoring, greedy_until, out_of_time, &starts);
  if (starts.empty()) return starts;
  add_repartitioned_frugal_starts(rules, scoring, Clock::now() + (deadline - Clock::now()) / 2, &starts);
  add_repaired_starts(rules, scoring, deadline, out_of_time, &starts);
  std::stable_sort(starts.begin(), starts.end(), [](const Start& a, const Start& b) { return a.score < b.score; });
  order_by_kind(starts);
  return starts;
}

}  // namespace optpipe
