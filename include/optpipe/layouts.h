// layouts.h — which layout to train a model with on a cluster: pipeline, tensor and data degrees,
// microbatch size and count for a global batch, and the schedule. Every layout of the cluster is
// built by the cost model, screened by its bounds (static memory, the iteration-time bound), and
// the most promising are optimized within the time limit; the answer is ranked by throughput
// beside a Megatron default: tensor parallelism across the node, 1F1B with the least selective
// recompute that fits.
//
//   LayoutSearchOptions o{.global_batch = 1024};
//   Result<LayoutSearch> r = search_layouts(find_model("llama2-70b").value, find_cluster("64xh100").value, o);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optpipe/cost_model.h"
#include "optpipe/optimize.h"
#include "optpipe/status.h"

namespace optpipe {

struct LayoutRow {
  int pp = 0, tp = 0, cp = 1, dp = 0, microbatch_size = 0, num_microbatches = 0;
  Status status;            // not ok: refused before any search (the reason: static memory, ...)
  double bound_us = 0;      // lower bound on the iteration time (the screen)
  bool evaluated = false;   // scheduled: the optimizer ran (or, for the default, its families)
  std::string schedule;     // "optimized vshape v2", or the family's label
  double iteration_us = 0;  // the schedule's makespan + the exposed data-parallel reduction + the optimizer step
  double dp_exposed_us = 0;
  double optimizer_us = 0;                               // the optimizer step (optimizer_step_us)
  double tokens_per_s = 0, tflops_per_gpu = 0, mfu = 0;  // model FLOPs (no recompute)
  int64_t peak_bytes = 0;
  bool fits = false, fits_any_timing = false;
  std::string label() const;  // "pp8 tp8 dp1", "pp8 tp4 cp2 dp2"
};

struct LayoutSearchOptions {
  int64_t global_batch = 0;      // sequences per iteration (required)
  int64_t mem_budget_bytes = 0;  // per GPU; 0: 90% of HBM
  double time_limit_s = 60;
  int max_microbatch_size = 8;  // microbatch sizes tried: 1, 2, 4, ... up to this
  uint64_t seed = 0;
  Precision precision = Precision::kBf16;
  bool tp_comm_overlap = false;
  int max_cp = 8;  // context-parallel degrees tried: 1, 2, 4, ... up to this, where the sequence divides
  // Called after each layout is evaluated: the row, how many are done, how many pass the screen.
  std::function<void(const LayoutRow&, int, int)> progress;
};

struct [[nodiscard]] LayoutSearch {
  std::vector<LayoutRow> rows;  // the evaluated, fastest first; then the screened, by bound
  LayoutRow megatron_default;   // status not ok when it has no layout that fits
  int layouts = 0;              // enumerated
  int evaluated = 0;
  double wall_s = 0;
};

// InvalidInput for a batch the cluster cannot share out, or a model/cluster the cost model refuses.
Result<LayoutSearch> search_layouts(const ModelSpec& m, const ClusterSpec& cluster, const LayoutSearchOptions& o);

}  // namespace optpipe
