// A family that overflows as published, fitted the way its users fit it by hand: Megatron's
// selective recompute (--recompute-granularity full --recompute-method block
// --recompute-num-layers k, with k per stage as small as fits) or PipeOffload's offload ratio (the
// smallest, in tenths, that fits). These are the baselines the optimizer has to beat: what a
// practitioner could configure without it.
#include <optional>

#include "families/common.h"
#include "optpipe/passes.h"

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

// "3/5 layers" when every stage recomputes the same share, "0–3/5 layers" when the counts differ
// over stages of one size, else the totals. Transformer layers: a stage's embedding or head item
// (recomputed with its first or last layer) is not counted.
std::string recompute_label(const Problem& p) {
  const std::vector<int> n = transformer_layers_per_stage(p);
  auto k_of = [&](int s) { return std::min(p.stages[s].recompute_layers, std::max(n[s], 1)); };
  int k_min = k_of(0), k_max = k_min, k_sum = 0, n_sum = 0;
  bool one_size = true;
  for (int s = 0; s < p.num_stages(); s++) {
    k_min = std::min(k_min, k_of(s));
    k_max = std::max(k_max, k_of(s));
    k_sum += k_of(s);
    n_sum += n[s];
    one_size = one_size && n[s] == n[0];
  }
  if (!one_size) return std::to_string(k_sum) + "/" + std::to_string(n_sum) + " layers";
  if (k_min == k_max) return std::to_string(k_max) + "/" + std::to_string(n[0]) + " layers";
  return std::to_string(k_min) + "–" + std::to_string(k_max) + "/" + std::to_string(n[0]) + " layers";
}

// A stage's count rises a layer at a time, or a 64th of its layers when it has more than 127
// (so that no stage takes more than 128 rounds, whatever its input says).
int layer_step(const StageSpec& g) { return std::max(1, g.num_layers / 64); }

// Raises, on every device over its budget, the count of its stage that recomputes the least share
// of its layers, until every device fits or some overflowing device has nothing left to recompute.
std::optional<FamilyRun> least_recompute(const FamilyRun& published, bool weights_in_b, const SimOptions& sim,
                                         Clock::time_point deadline) {
  const Problem& p = published.built.problem;
  const Schedule& s = published.built.schedule;
  std::vector<int> layers(p.num_stages(), 0);
  int max_rounds = 0;  // each round raises at least one count
  for (const StageSpec& g : p.stages) max_rounds += (g.num_layers + layer_step(g) - 1) / layer_step(g);
  Timeline t = published.timeline;
  for (int round = 0; round < max_rounds && Clock::now() <= deadline; round++) {
    bool raised_all = true;
    for (int d = 0; d < p.num_devices; d++) {
      if (t.devices[d].peak_bytes <= p.devices[d].mem_budget_bytes) continue;
      int pick = -1;
      for (int st = 0; st < p.num_stages(); st++) {
        if (p.device_of(st) != d || layers[st] == p.stages[st].num_layers) continue;
        const double share = static_cast<double>(layers[st]) / p.stages[st].num_layers;
        if (pick < 0 || share < static_cast<double>(layers[pick]) / p.stages[pick].num_layers) pick = st;
      }
      if (pick < 0)
        raised_all = false;
      else
        layers[pick] = std::min(p.stages[pick].num_layers, layers[pick] + layer_step(p.stages[pick]));
    }
    if (!raised_all) return std::nullopt;  // a device overflows with every layer recomputed
    Result<Problem> configured = with_recompute_layers(p, layers, weights_in_b);
    if (!configured.ok()) return std::nullopt;  // e.g. a backward grown past the longest duration allowed
    SimResult r = simulate(configured.value, s, {.op_times = false, .any_timing = false});
    OPTPIPE_CHECK(r.ok(), "a recompute configuration does not simulate: " + r.status.message);
    if (fits_budget(configured.value, r.timeline)) {
      FamilyRun run;
      run.family = published.family;
      run.tuning = Tuning::kRecompute;
      run.label =
          published.label + " +recompute " + recompute_label(configured.value) + (weights_in_b ? ", W in B" : "");
      run.built = {std::move(configured.value), s};
      score_run(sim, &run);
      return run;
    }
    t = std::move(r.timeline);
  }
  return std::nullopt;
}

// The smallest ratio, in tenths, whose offloads (add_offloads) fit; gated to fit under any timing,
// as PipeOffload's runtime waits on a copy before reusing its memory.
std::optional<FamilyRun> least_offload(const FamilyRun& published, const SimOptions& sim, Clock::time_point deadline) {
  const Problem& p = published.built.problem;
  const Schedule& s = published.built.schedule;
  for (int tenths = 1; tenths <= 10 && Clock::now() <= deadline; tenths++) {
    Schedule offloaded = add_offloads(p, s, 2, tenths / 10.0);
    if (offloaded.num_ops() == s.num_ops()) continue;
    SimResult r = simulate(p, offloaded, {.op_times = true, .any_timing = false});
    OPTPIPE_CHECK(r.ok(), "an offload ratio does not simulate: " + r.status.message);
    if (!fits_budget(p, r.timeline)) continue;
    FamilyRun run;
    run.family = published.family;
    run.tuning = Tuning::kOffload;
    run.offload_fraction = tenths / 10.0;
    run.label = published.label + " +offload " + std::to_string(tenths * 10) + "%";
    run.built = {p, gate_for_any_timing(p, offloaded, r.timeline).schedule};
    score_run(sim, &run);
    return run;
  }
  return std::nullopt;
}

// The published schedule on the practitioners' partitions: the faster that fits, if it fits where
// the balanced cut does not or runs faster. The schedule is the same; its stage costs move.
std::optional<FamilyRun> practice_partition(const FamilyRun& published, const SimOptions& sim) {
  const Problem& p = published.built.problem;
  if (!layers_match(p)) return std::nullopt;
  std::optional<FamilyRun> best;
  for (PartitionRule rule : {PartitionRule::kEven, PartitionRule::kEvenAccounted}) {
    Result<std::vector<int>> counts = partition_counts(p, rule);
    if (!counts.ok() || counts.value == items_per_stage(p)) continue;
    Result<Problem> cut = with_partition(p, counts.value);
    if (!cut.ok()) continue;
    FamilyRun run = published;
    run.tuning = Tuning::kPartition;
    run.label = published.label + " [" + partition_rule_name(rule) + "]";
    run.built.problem = std::move(cut.value);
    run.built.problem.partition = rule;
    run.built.schedule.items_per_stage = counts.value;
    score_run(sim, &run);
    const FamilyRun& than = best ? *best : published;
    if (run.status.ok() && run.fits && (!than.fits || run.timeline.makespan_us < than.timeline.makespan_us))
      best = std::move(run);
  }
  return best;
}

}  // namespace

std::vector<FamilyRun> practitioner_runs(const FamilyRun& published, const SimOptions& sim,
                                         Clock::time_point deadline) {
  std::vector<FamilyRun> out;
  const Schedule& s = published.built.schedule;
  if (!published.status.ok()) return out;
  if (Clock::now() <= deadline)
    if (std::optional<FamilyRun> r = practice_partition(published, sim)) out.push_back(std::move(*r));
  if (published.fits || has_compute_op(s, OpKind::kR) || has_offloads(s)) return out;
  // A split backward may hold the rerun layers' inputs for W or compute their weight gradients in
  // B; a practitioner keeps the faster of the two that fits.
  std::optional<FamilyRun> recompute = least_recompute(published, false, sim, deadline);
  if (has_compute_op(s, OpKind::kW)) {
    std::optional<FamilyRun> in_b = least_recompute(published, true, sim, deadline);
    if (in_b && (!recompute || in_b->timeline.makespan_us < recompute->timeline.makespan_us)) recompute = in_b;
  }
  if (recompute) out.push_back(std::move(*recompute));
  if (std::optional<FamilyRun> r = least_offload(published, sim, deadline)) out.push_back(std::move(*r));
  return out;
}

}  // namespace optpipe
