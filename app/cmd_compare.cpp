// optpipe compare: every family on one problem, one table (and with --noise, their figures under
// timing noise).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "inputs.h"
#include "optpipe/results_json.h"
#include "optpipe/units.h"
#include "tables.h"

namespace optpipe {

namespace {

struct CompareArgs {
  std::string problem_path;
  std::vector<int> chunks;  // the interleaved families' chunk counts; empty: every count the layers allow
  NoiseArgs noise;
  bool as_json = false;
};

using Row = std::vector<std::string>;

// "12.3 45.6 ... GiB": each device's peak, in GiB, or MiB when every device stays under 1 GiB.
std::string peaks_per_device(const Timeline& t) {
  const bool gib = max_peak(t) >= (1ll << 30);
  std::string out;
  for (const DeviceFigures& d : t.devices) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", out.empty() ? "" : " ", d.peak_bytes / double(gib ? 1ll << 30 : 1 << 20));
    out += buf;
  }
  return out + (gib ? " GiB" : " MiB");
}

Row noise_cells(const NoiseReport& n) {
  const std::string of = " of " + std::to_string(n.samples);
  return {std::isnan(n.p50_makespan_us) ? "-" : format_us(n.p50_makespan_us),
          std::isnan(n.p95_makespan_us) ? "-" : format_us(n.p95_makespan_us), std::to_string(n.overflowed) + of,
          std::to_string(n.stuck) + of};
}

// One family's table row and JSON; with noise, also its noise evaluation.
Status family_row(const FamilyRun& o, const std::optional<NoiseSpec>& noise, Row* row, nlohmann::json* j) {
  if (!o.status.ok()) {
    *row = {o.label, placement_label(*o.family), "-", "-", "-", "-", "-", "n/a", o.status.message};
    if (noise) row->insert(row->begin() + 3, {"-", "-", "-", "-"});
    *j = family_run_json(o);
    return Status::Ok();
  }
  const Timeline& t = o.timeline;
  // The fastest any schedule of this placement could be: one that fits the budget when this row
  // fits, any schedule when it does not.
  const double bound = lower_bound_for(o.built.problem, o.fits);
  int64_t worst = 0;
  for (const DeviceFigures& d : t.devices) worst = std::max(worst, d.worst_peak_bytes);
  char bubble[32];
  std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * t.bubble_ratio);
  *row = {o.label,
          placement_label(o.built.problem.placement, o.built.problem.chunks_per_device),
          format_us(t.makespan_us),
          format_us(bound),
          bubble,
          format_bytes(max_peak(t)),
          format_bytes(worst),
          fits_cell(o.fits_any_timing, o.fits),
          peaks_per_device(t)};
  *j = family_run_json(o);
  if (noise) {
    Result<NoiseReport> r = evaluate_noise(o.built.problem, o.built.schedule, *noise);
    if (!r.ok()) return r.status;
    const Row cells = noise_cells(r.value);
    row->insert(row->begin() + 3, cells.begin(), cells.end());
    (*j)["noise"] = noise_json(*noise, r.value);
  }
  (*j)["lower_bound_us"] = bound;
  return Status::Ok();
}

int run_compare(const CompareArgs& a, const std::optional<NoiseSpec>& noise) {
  Result<Problem> p = load_problem(a.problem_path);
  if (!p.ok()) return fail(p.status);
  nlohmann::json rows_json = nlohmann::json::array();
  std::vector<Row> rows = {{"family", "placement", "makespan", "lower bound", "bubble", "peak memory", "worst case",
                            "fits", "peak per device"}};
  if (noise) rows[0].insert(rows[0].begin() + 3, {"p50 noisy", "p95 noisy", "over budget", "stuck"});
  int num_fit = 0;
  for (const FamilyRun& o :
       run_families(p.value, {.op_times = false}, std::chrono::steady_clock::time_point::max(), a.chunks)) {
    Row row;
    nlohmann::json j;
    if (Status st = family_row(o, noise, &row, &j); !st.ok()) return fail(st);
    num_fit += o.status.ok() && o.fits;
    rows.push_back(std::move(row));
    rows_json.push_back(std::move(j));
  }
  if (a.as_json) {
    print_json({{"problem", problem_summary_json(p.value)}, {"families", rows_json}, {"num_fit", num_fit}});
  } else {
    std::printf("problem: %s\n\n%s", problem_summary(p.value).c_str(), aligned_table(rows).c_str());
    if (noise)
      std::printf(
          "\nnoisy: %d samples, per-op jitter σ %g, profile error σ %g, seed %llu; over budget: the samples in "
          "which a device passes its budget as planned (out of memory on a GPU); stuck: those in which, "
          "holding allocations until frees make room, nothing can\n",
          noise->samples, noise->jitter_sigma, noise->profile_sigma, static_cast<unsigned long long>(noise->seed));
  }
  return num_fit > 0 ? kExitOk : kExitInfeasible;
}

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = app.add_subcommand("compare", "run every family on one problem and compare");
  add_problem_option(c, &a->problem_path);
  a->noise.add_to(c);
  c->add_option("--chunks", a->chunks,
                "the interleaved families at these chunk counts only (repeatable, or a list: 2,4; default: every "
                "count the layers allow)")
      ->delimiter(',')
      ->check(CLI::Range(2, 64));
  add_json_flag(c, &a->as_json);
  return {c, [a, c] { return run_compare(*a, a->noise.asked(c)); }};
}

}  // namespace optpipe
