// The layout search: enumerate, screen by bounds, optimize the most promising, rank.
#include "optpipe/layouts.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "optpipe/families.h"
#include "optpipe/simulate.h"

namespace optpipe {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Problems past this many op ids are left unsearched: a slice of the time limit cannot schedule them.
constexpr int64_t kMaxSearchedOpIds = 400000;

struct Candidate {
  LayoutRow row;
  Problem problem;
};

// The row's throughput from the schedule's makespan.
void set_throughput(const ModelSpec& m, const ClusterSpec& c, int64_t global_batch, double makespan_us,
                    LayoutRow* row) {
  row->iteration_us = makespan_us + row->dp_exposed_us + row->optimizer_us;
  const double seconds = row->iteration_us * 1e-6;
  row->tokens_per_s = static_cast<double>(global_batch) * m.seq_len / seconds;
  row->tflops_per_gpu = model_flops(m, global_batch) / seconds / c.num_gpus / 1e12;
  row->mfu = row->tflops_per_gpu / c.peak_tflops;
}

// The layout's problem, or the row's reason it has none (the cost model's refusal, static memory).
std::optional<Problem> layout_problem(const ModelSpec& m, const ClusterSpec& cluster, const LayoutSearchOptions& o,
                                      LayoutRow* row) {
  PlanSpec plan;
  plan.num_microbatches = row->num_microbatches;
  plan.microbatch_size = row->microbatch_size;
  plan.mem_budget_bytes = o.mem_budget_bytes;
  plan.tp = row->tp;
  plan.cp = row->cp;
  plan.dp = row->dp;
  plan.precision = o.precision;
  plan.tp_comm_overlap = o.tp_comm_overlap;
  Result<Problem> p = build_problem(m, cluster, plan);
  if (p.ok())
    row->status = static_memory_status(p.value, {});
  else
    row->status = p.status;
  if (!row->status.ok()) return std::nullopt;
  row->dp_exposed_us = dp_exposed_us(m, cluster, plan);
  row->optimizer_us = optimizer_step_us(m, cluster, plan);
  row->bound_us = lower_bound_for(p.value, true, Objective::kMakespan) + row->dp_exposed_us + row->optimizer_us;
  return std::move(p.value);
}

// Megatron's default for the cluster: tensor parallelism across the node (as far as the heads
// allow), microbatches of one sequence, the fewest pipeline stages whose static memory fits, and
// 1F1B as published or with the least selective recompute that fits.
LayoutRow megatron_default(const ModelSpec& m, const ClusterSpec& cluster, const LayoutSearchOptions& o) {
  LayoutRow row;
  row.status = Status::Infeasible("no layout with tensor parallelism across the node fits 1F1B");
  int tp = 1;
  while (tp * 2 <= cluster.gpus_per_node && cluster.num_gpus % (tp * 2) == 0 && m.kv_heads % (tp * 2) == 0) tp *= 2;
  for (int pp = 1; pp <= std::min(cluster.num_gpus / tp, m.num_layers); pp++) {
    if ((cluster.num_gpus / tp) % pp != 0) continue;
    const int dp = cluster.num_gpus / (tp * pp);
    if (o.global_batch % dp != 0 || o.global_batch / dp < pp) continue;
    LayoutRow r{
        .pp = pp, .tp = tp, .dp = dp, .microbatch_size = 1, .num_microbatches = static_cast<int>(o.global_batch / dp)};
    std::optional<Problem> p = layout_problem(m, cluster, o, &r);
    if (!p) continue;
    for (const FamilyRun& run : run_families(*p, {.op_times = false})) {
      if (run.family->name != std::string("1f1b") || !run.status.ok() || !run.fits) continue;
      if (run.tuning != Tuning::kAsPublished && run.tuning != Tuning::kRecompute) continue;
      r.evaluated = true;
      r.schedule = run.label;
      r.fits = true;
      r.fits_any_timing = run.fits_any_timing;
      r.peak_bytes = max_peak(run.timeline);
      set_throughput(m, cluster, o.global_batch, run.timeline.makespan_us, &r);
      return r;
    }
  }
  return row;
}

}  // namespace

std::string LayoutRow::label() const {
  return "pp" + std::to_string(pp) + " tp" + std::to_string(tp) + (cp > 1 ? " cp" + std::to_string(cp) : "") + " dp" +
         std::to_string(dp);
}

Result<LayoutSearch> search_layouts(const ModelSpec& m, const ClusterSpec& cluster, const LayoutSearchOptions& o) {
  using R = Result<LayoutSearch>;
  const Clock::time_point t0 = Clock::now();
  if (o.global_batch < 1 || o.global_batch > 100000000)
    return R::Error(
        Status::Invalid("the global batch must be 1 to 1e8 sequences, got " + std::to_string(o.global_batch)));
  if (!(o.time_limit_s > 0)) return R::Error(Status::Invalid("the time limit must be positive"));
  if (cluster.num_gpus < 1 || cluster.gpus_per_node < 1)
    return R::Error(Status::Invalid("cluster \"" + cluster.name + "\": needs GPUs and GPUs per node"));
  LayoutSearch out;
  std::vector<Candidate> candidates;
  std::vector<LayoutRow> refused;
  const int G = cluster.num_gpus;
  for (int tp = 1; tp <= cluster.gpus_per_node; tp *= 2) {
    for (int cp = 1; cp <= std::max(1, o.max_cp); cp *= 2) {
      if (G % (tp * cp) != 0 || (cp > 1 && m.seq_len % (2 * cp) != 0)) continue;
      const int model_gpus = G / (tp * cp);  // pipeline × data-parallel GPUs
      for (int dp = 1; dp <= model_gpus; dp++) {
        if (model_gpus % dp != 0 || o.global_batch % dp != 0) continue;
        const int pp = model_gpus / dp;
        for (int b = 1; b <= o.max_microbatch_size; b *= 2) {
          if (o.global_batch % (int64_t{dp} * b) != 0) continue;
          const int64_t M = o.global_batch / (int64_t{dp} * b);
          if (M < pp || M > 100000) continue;  // a pipeline wants as many microbatches as stages
          LayoutRow row{
              .pp = pp, .tp = tp, .cp = cp, .dp = dp, .microbatch_size = b, .num_microbatches = static_cast<int>(M)};
          out.layouts++;
          std::optional<Problem> p = layout_problem(m, cluster, o, &row);
          if (p)
            candidates.push_back({row, std::move(*p)});
          else
            refused.push_back(row);
        }
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.row.bound_us < b.row.bound_us; });

  out.megatron_default = megatron_default(m, cluster, o);
  // Each layout gets a twentieth of most of the limit, so that twenty are optimized when the
  // screen passes that many; the search stops when the next would pass the limit.
  const double slice_s = o.time_limit_s * 0.8 / 20;
  std::vector<LayoutRow> evaluated, waiting;
  for (Candidate& c : candidates) {
    LayoutRow& row = c.row;
    const int64_t op_ids = num_op_ids(c.problem);
    if (seconds_since(t0) + slice_s > o.time_limit_s * 0.95 || op_ids > kMaxSearchedOpIds) {
      if (op_ids > kMaxSearchedOpIds)
        row.status =
            Status::Invalid("not searched: " + std::to_string(op_ids) + " op ids is more than a slice can schedule");
      waiting.push_back(row);
      continue;
    }
    OptimizeOptions oo;
    oo.time_limit_s = slice_s;
    oo.seed = o.seed;
    OptimizeResult r = optimize(c.problem, oo);
    row.evaluated = true;
    out.evaluated++;
    if (!r.status.ok() || r.outcome == Outcome::kInfeasible) {
      row.status = r.status.ok() ? Status::Infeasible("nothing found fits the budget") : r.status;
    } else {
      row.schedule = "optimized " + std::string(placement_name(r.problem.placement)) + " v" +
                     std::to_string(r.problem.chunks_per_device);
      row.fits = true;
      row.fits_any_timing = fits_any_timing(r.problem, r.timeline);
      row.peak_bytes = max_peak(r.timeline);
      set_throughput(m, cluster, o.global_batch, r.timeline.makespan_us, &row);
    }
    evaluated.push_back(row);
    if (o.progress) o.progress(row, out.evaluated, static_cast<int>(candidates.size()));
  }
  std::stable_sort(evaluated.begin(), evaluated.end(), [](const LayoutRow& a, const LayoutRow& b) {
    if (a.fits != b.fits) return a.fits;
    return a.iteration_us < b.iteration_us;
  });
  out.rows = std::move(evaluated);
  for (LayoutRow& r : waiting) out.rows.push_back(std::move(r));
  for (LayoutRow& r : refused) out.rows.push_back(std::move(r));
  out.wall_s = seconds_since(t0);
  return R::Of(std::move(out));
}

}  // namespace optpipe
