// export.h — schedules in the forms other tools read, and as pictures.
//
// All exporters take a simulated timeline (simulate() with op_times, and memory_curve for the
// charts and the counter track), so every number they show is the simulator's.
//
//   SimResult r = simulate(p, s, {.op_times = true, .memory_curve = true});
//   std::string trace = chrome_trace_json(p, s, r.timeline);   // chrome://tracing, Perfetto
//   Result<CsvExport> csv = pytorch_csv(s);                     // torch.distributed.pipelining
//   std::string svg = schedule_svg(p, s, r.timeline, "zb-v");  // Gantt + memory curves
#pragma once

#include <string>
#include <vector>

#include "optpipe/plan_file.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/simulate.h"

namespace optpipe {

// Fill colours by op kind (indexed by OpKind), shared by the SVG and the report's legend.
const char* op_colour(OpKind k);

// Chrome trace: a process per device, a thread per stream (compute, device→host, host→device),
// "X" events named like "F3 s1" with real durations in µs, and a "memory" counter per device.
std::string chrome_trace_json(const Problem& p, const Schedule& s, const Timeline& t);

// PyTorch torch.distributed.pipelining CSV, compute_only form (torch ≥ 2.6 action names): one
// row per rank, one cell per action "{stage}{F|I|W|B}{microbatch}", I = input-gradient B,
// B = fused BW, for _PipelineScheduleRuntime._load_csv(path, "compute_only"). Microbatches are
// renumbered so that the last stage's k-th forward is microbatch k (that runtime reads each loss
// back in forward order), and `notes` says so when it moved any. Offloads, reloads and recomputes have no action there,
// and without them the schedule may overflow its budget: such a schedule is refused (InvalidInput naming the first of
// them) unless `drop_memory_ops`, and then `notes` says what was left out (empty when nothing was).
struct [[nodiscard]] CsvExport {
  std::string csv;
  std::vector<std::string> notes;
};
Result<CsvExport> pytorch_csv(const Schedule& s, bool drop_memory_ops = false);

// The plan's layout and partition as Megatron-LM's flags, one line: --pipeline-model-parallel-size,
// --num-layers and --pipeline-model-parallel-layout (its grammar: E, t, L, "|", "(...)*n", "x*n"),
// the microbatch group size where Megatron's interleaved schedule needs one, recompute flags
// where Megatron can say what the plan recomputes, and with what the plan was planned for
// (plan_file.h) the tensor size, sequence parallelism, distributed optimizer, micro and global
// batch and the model's shape; comments say what the flags cannot carry. InvalidInput for a V or
// wave placement (Megatron's is looped), chunks on one device, fewer microbatches than ranks with
// chunks, or a problem without its items.
Result<std::string> megatron_flags(const Problem& p, const Schedule& s, const PlannedFor* planned_for = nullptr);
// The same for torchtitan 0.2: its TOML ([training] batch and sequence, [parallelism] degrees,
// microbatch size, module_fqns_per_model_part with Llama's module names, the schedule name whose
// stage-to-rank style matches the placement, the schedule CSV's path).
Result<std::string> torchtitan_toml(const Problem& p, const std::string& csv_path,
                                    const PlannedFor* planned_for = nullptr);
// torchtitan 0.3, which reads no TOML: a Python function apply_optpipe_plan(config) setting the
// same fields on a Trainer.Config (the head named lm_head, as 0.3 names it).
Result<std::string> torchtitan_config(const Problem& p, const std::string& csv_path,
                                      const PlannedFor* planned_for = nullptr);

// One SVG: per device a compute lane and its offload and reload lanes (ops coloured by kind,
// microbatch on each box, later chunks lighter, idle time blank), a time axis in ms, then per
// device the memory curve against the budget line with the peak marked.
std::string schedule_svg(const Problem& p, const Schedule& s, const Timeline& t, const std::string& title);

// A self-contained HTML page: problem summary, comparison table, charts. Nothing is fetched.
struct ReportRow {
  std::string name;
  std::string placement;
  bool applicable = true;
  std::string reason;  // when not applicable
  double makespan_us = 0, bubble_ratio = 0;
  int64_t peak_bytes = 0;
  bool fits = false;
};
struct ReportChart {
  std::string heading;
  std::string svg;
};
std::string html_report(const std::string& title, const std::string& problem_summary,
                        const std::vector<ReportRow>& rows, const std::vector<ReportChart>& charts);

}  // namespace optpipe
