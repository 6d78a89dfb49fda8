// What the commands share: common options, labels, checked timelines, the report's parts.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "cli.h"
#include "commands.h"
#include "optpipe/units.h"
#include "optpipe/validate.h"

namespace optpipe {

void add_problem_option(CLI::App* c, std::string* path) {
  c->add_option("--problem,-p", *path, "problem JSON (default: the built-in problem)");
}

void add_json_flag(CLI::App* c, bool* as_json) { c->add_flag("--json", *as_json, "print one JSON object on stdout"); }

void NoiseArgs::add_to(CLI::App* c) {
  c->add_option("--noise", spec.jitter_sigma, "also evaluate under timing noise: per-op jitter sigma (e.g. 0.05)")
      ->check(CLI::Range(0.0, 2.0));
  c->add_option("--profile-error", spec.profile_sigma,
                "with --noise: per-stage and per-link error sigma, once per sample")
      ->check(CLI::Range(0.0, 2.0));
  c->add_option("--samples", spec.samples, "with --noise: samples (default 200)")->check(CLI::Range(1, 1000000));
  c->add_option("--seed", spec.seed, "with --noise: random seed")->check(kNoMinus);
}

std::optional<NoiseSpec> NoiseArgs::asked(CLI::App* c) const {
  if (c->count("--noise") + c->count("--profile-error") + c->count("--samples") + c->count("--seed") == 0)
    return std::nullopt;
  return spec;
}

void OptimizerArgs::add_timing(CLI::App* c) {
  c->add_option("--timing", timing,
                "any: the schedule fits under any timing (gated; the default); exact: only at the profile's timings")
      ->check(CLI::IsMember({"any", "exact"}));
}

void OptimizerArgs::add_rules(CLI::App* c) {
  c->add_option("--placement", placements, "only this placement (repeatable): linear, interleaved, vshape, wave")
      ->check(CLI::IsMember({"linear", "interleaved", "vshape", "wave"}));
  c->add_option("--chunks", options.rules.chunk_counts,
                "only this many chunks per device (virtual stages; repeatable, or a list: 2,4)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  c->add_flag("--no-offload", no_offload, "no offloads (a runtime without host transfers)");
  c->add_flag("--no-recompute", no_recompute, "no recomputes");
  c->add_flag("--whole-stage-recompute", options.rules.whole_stage_recompute,
              "a stage recomputes every microbatch or none (activation checkpointing as Megatron and torch set it)");
  c->add_option("--partition", partition,
                "layers over stages: free (the optimizer moves them; the default), balanced, even (Megatron's "
                "default), even-accounted (the embedding and head count as a layer: torchtitan's default)")
      ->check(CLI::IsMember({"free", "balanced", "even", "even-accounted", "uniform"}));
  c->add_option("--layers-per-stage", layers_per_stage,
                "pin the partition: transformer layers per stage, in model order (e.g. 5,5,6,4; with --placement "
                "when the count is not the number of devices)")
      ->delimiter(',')
      ->check(CLI::Range(0, 100000));
}

Status OptimizerArgs::apply_partition(Problem* p, OptimizeOptions* o) const {
  if (partition == "free" && layers_per_stage.empty()) return Status::Ok();
  if (!layers_match(*p))
    return Status::Invalid(
        "--partition and --layers-per-stage need a problem with its layers (plan's, or a problem JSON that plan "
        "--problem-out wrote, its stages unedited)");
  if (!layers_per_stage.empty()) {
    if (partition != "free") return Status::Invalid("--layers-per-stage pins the partition: leave out --partition");
    const int S = static_cast<int>(layers_per_stage.size()), D = p->num_devices;
    if (S % D != 0)
      return Status::Invalid("--layers-per-stage: " + std::to_string(S) + " counts for " + std::to_string(D) +
                             " devices (give one per stage: D·v of them)");
    Placement placement = Placement::kLinear;
    if (o->rules.placements.size() == 1)
      placement = o->rules.placements[0];
    else if (S != D)
      return Status::Invalid("--layers-per-stage: " + std::to_string(S) + " stages on " + std::to_string(D) +
                             " devices: say which placement with one --placement");
    Result<Problem> placed = rechunk(*p, placement, S / D);
    if (!placed.ok()) return placed.status;
    std::vector<int> items = layers_per_stage;
    items.front() += placed.value.layers.front().kind == LayerKind::kEmbedding;
    items.back() += placed.value.layers.back().kind == LayerKind::kHead;
    Result<Problem> cut = with_partition(placed.value, items);
    if (!cut.ok()) return cut.status;
    *p = std::move(cut.value);
    o->rules.placements = {placement};
    o->rules.chunk_counts = {S / D};
  } else {
    OPTPIPE_CHECK(parse_partition_rule(partition == "uniform" ? "even" : partition, &p->partition),
                  "CLI11 checked the name");
    Result<std::vector<int>> counts = partition_counts(*p, p->partition);
    if (!counts.ok()) return counts.status;
    Result<Problem> cut = with_partition(*p, counts.value);
    if (!cut.ok()) return cut.status;
    *p = std::move(cut.value);
  }
  o->rules.fixed_partition = true;
  return Status::Ok();
}

void OptimizerArgs::add_to(CLI::App* c) {
  add_timing(c);
  add_rules(c);
  c->add_option("--objective", objective,
                "makespan (the default), or span: the longest per-device span, the period when iterations overlap")
      ->check(CLI::IsMember({"makespan", "span"}));
  c->add_option("--robust", options.robust_sigma,
                "prefer the schedule whose makespan degrades least: score by the p90 makespan under per-op jitter of "
                "this sigma (e.g. 0.1)")
      ->check(CLI::Range(0.0, 2.0));
  c->add_option("--robust-samples", options.robust_samples, "with --robust: samples per candidate (default 8)")
      ->check(CLI::Range(1, 1000));
  c->add_option("--time-limit", options.time_limit_s, "optimizer seconds (the best so far is returned)")
      ->check(CLI::Range(0.01, 1e6));
  c->add_option("--seed", options.seed, "random seed")->check(kNoMinus);
  c->add_option("--threads", options.threads, "parallel searches")->check(CLI::Range(1, 256));
  c->add_flag("--quiet,-q", quiet, "no progress on stderr");
  c->add_flag(
      "--exact", options.exact,
      "then the exact models (CP on Gecode, MILP on CBC; small problems): a better schedule or a tighter bound");
  c->add_option("--max-evaluations", options.max_evaluations,
                "search budget in candidates, for repeatable runs (0: search until the time limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
}

namespace {

void print_progress(const Progress& g) {
  const std::string best = g.best_us > 0 ? format_us(g.best_us) : std::string("none fits yet");
  const std::string gap =
      g.best_us > 0 ? fmt::format("{:.1f}%", 100 * (g.best_us - g.lower_bound_us) / g.best_us) : "-";
  std::fprintf(stderr, "[%6.1fs] %9lld candidates  best %-12s bound %-12s gap %s\n", g.elapsed_s,
               static_cast<long long>(g.evaluations), best.c_str(), format_us(g.lower_bound_us).c_str(), gap.c_str());
}

}  // namespace

OptimizeOptions OptimizerArgs::parsed() const {
  OptimizeOptions o = options;
  o.any_timing = timing == "any";
  OPTPIPE_CHECK(parse_objective(objective, &o.objective), "CLI11 checked the name");
  o.rules.offload = !no_offload;
  o.rules.recompute = !no_recompute;
  for (const std::string& name : placements) {
    Placement placement;
    OPTPIPE_CHECK(parse_placement(name, &placement), "CLI11 checked the name");
    o.rules.placements.push_back(placement);
  }
  if (!quiet) o.progress = print_progress;
  return o;
}

std::string placement_label(const Family& f) { return placement_label(f.placement, f.chunks_per_device); }

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

Result<Timeline> checked_timeline(const FamilySchedule& fs, const std::string& what, const SimOptions& sim) {
  Validation v = validate(fs.problem, fs.schedule, {.check_memory_budget = false, .sim = sim});
  if (!v.ok())
    return Result<Timeline>::Error(
        Status::Invalid(what + " is not a valid schedule for this problem:\n" + v.summary()));
  return Result<Timeline>::Of(std::move(v.sim.timeline));
}

std::vector<ReportRow> report_rows(const std::vector<FamilyRun>& runs, const OptimizeResult& r) {
  std::vector<ReportRow> rows;
  const std::vector<bool> shown = at_best_chunks(runs, Objective::kMakespan);
  for (size_t k = 0; k < runs.size(); k++) {
    const FamilyRun& o = runs[k];
    if (!shown[k]) continue;
    rows.push_back({o.label,
                    o.status.ok() ? placement_label(o.built.problem.placement, o.built.problem.chunks_per_device)
                                  : placement_label(*o.family),
                    o.status.ok(), o.status.message, o.timeline.makespan_us, o.timeline.bubble_ratio,
                    o.status.ok() ? max_peak(o.timeline) : 0, o.fits});
  }
  rows.push_back({"optimized", placement_label(r.problem.placement, r.problem.chunks_per_device), true, "",
                  r.timeline.makespan_us, r.timeline.bubble_ratio, max_peak(r.timeline),
                  r.outcome != Outcome::kInfeasible});
  return rows;
}

std::vector<ReportChart> report_charts(const OptimizeResult& r, const std::vector<FamilyRun>& runs,
                                       const std::vector<std::string>& chart_families) {
  const FamilyRun* best = fastest_fitting(runs);
  std::vector<ReportChart> charts;
  charts.push_back({r.outcome == Outcome::kInfeasible ? "Optimized (best found; over the budget)" : "Optimized",
                    schedule_svg(r.problem, r.schedule, r.timeline, "optimized")});
  if (best)
    charts.push_back({"Fastest family that fits: " + best->label,
                      schedule_svg(best->built.problem, best->built.schedule, best->timeline, best->label)});
  for (const std::string& name : chart_families)
    for (const FamilyRun& o : runs)
      if (name == o.label && &o != best && o.status.ok())
        charts.push_back({name, schedule_svg(o.built.problem, o.built.schedule, o.timeline, name)});
  return charts;
}

std::string timing_line(const OptimizeOptions& options, const OptimizeResult& r) {
  std::string line =
      !options.any_timing
          ? "timing: exact — fits the budget at the profile's timings, not necessarily if they drift"
          : fmt::format("timing: any — fits the budget under any timing ({} WAIT(s) and {} reload gate(s) added, {})",
                        r.stats.waits_added, r.stats.reload_gates_added,
                        r.stats.gating_cost_us > 0
                            ? fmt::format("{:.2f} ms at the profile's timings: ties lost on a shared host link",
                                          r.stats.gating_cost_us / 1e3)
                            : std::string("no cost at the profile's timings"));
  if (options.robust_sigma > 0)
    line += fmt::format("\nrobust: candidates scored by their p90 makespan over {} samples of per-op jitter σ {}",
                        options.robust_samples, options.robust_sigma);
  return line;
}

namespace {

std::string bytes_per_device(const std::vector<int64_t>& bytes) {
  std::string out;
  for (int64_t b : bytes) out += " " + format_bytes(b);
  return out;
}

}  // namespace

std::string infeasible_text(const OptimizeOptions& options, const OptimizeResult& r) {
  std::string text = "nothing found fits the budget; per device:\n";
  text += "  the best schedule found needs        " + bytes_per_device(r.needed_budget_bytes) + "\n";
  if (!r.frugal_budget_bytes.empty())
    text += "  the frugal schedule needs            " + bytes_per_device(r.frugal_budget_bytes) + "  (" +
            r.frugal_label + ": one microbatch in flight; at or above this optpipe always answers)\n";
  text += "  no schedule can fit in less than     " + bytes_per_device(r.budget_lower_bound_bytes) +
          "  (proven, over every placement, chunk count and partition searched)\n";
  text += "  with one budget for every device, none fits in less than " +
          format_bytes(r.uniform_budget_lower_bound_bytes) + " (proven)\n";
  std::vector<std::string> helps;
  if (!r.frugal_budget_bytes.empty())
    helps.push_back("a budget of " +
                    format_bytes(*std::max_element(r.frugal_budget_bytes.begin(), r.frugal_budget_bytes.end())) +
                    " per device");
  for (const std::string& rule : r.would_help) helps.push_back(rule);
  // Beyond this problem: the cost model's layout (plan --search).
  helps.push_back("more pipeline stages (fewer layers, less static memory and smaller activations a device)");
  text += "what would help: ";
  for (size_t k = 0; k < helps.size(); k++) text += (k ? "; " : "") + helps[k];
  return text + "\n";
}

std::string gap_detail_lines(const OptimizeResult& r) {
  std::string text;
  if (r.gap - r.placement_gap >= 0.0005)
    text += fmt::format(
        "gap within its placement ({} v{}): {:.1f}% to its bound {}; the rest is the weaker bound of "
        "another placement searched\n",
        placement_name(r.problem.placement), r.problem.chunks_per_device, 100 * r.placement_gap,
        format_us(r.placement_lower_bound_us));
  if (r.placement_gap - r.cut_gap >= 0.0005)
    text += fmt::format(
        "gap within its cut of the layers: {:.1f}% to its bound {}; the rest is the bound over the cuts "
        "not taken\n",
        100 * r.cut_gap, format_us(r.cut_lower_bound_us));
  return text;
}

std::string partition_line(const OptimizeResult& r) {
  if (!layers_match(r.problem)) return "";
  const std::vector<int> layers = transformer_layers_per_stage(r.problem);
  std::string counts;
  for (size_t s = 0; s < layers.size(); s++) {
    counts += s ? " " : "";
    if (s == 0 && r.problem.layers.front().kind == LayerKind::kEmbedding) counts += "E+";
    counts += std::to_string(layers[s]);
    if (s + 1 == layers.size() && r.problem.layers.back().kind == LayerKind::kHead) counts += "+H";
  }
  return "partition: transformer layers per stage " + counts +
         (r.stats.partition_moves > 0
              ? " (" + std::to_string(r.stats.partition_moves) + " layer(s) moved by the optimizer)"
              : "");
}

}  // namespace optpipe
