// plan_file.h — a plan as the one file a user carries to the trainer: the schedule, the problem it
// runs on, what it was planned for (model, cluster, layout, batch, budget), and who wrote it.
//
// Format "optpipe.schedule/2"; "optpipe.schedule/1" (the schedule alone) still reads, with no
// problem and nothing planned for. Every field beside the schedule's is optional.
//
//   PlanFile f{.schedule = r.schedule, .problem = r.problem, .planned_for = context};
//   write_text_file("optpipe_schedule.json", plan_file_to_json(f));
//   Result<PlanFile> back = plan_file_from_json(text);   // back.value.problem: the plan's own
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "optpipe/cost_model.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"

namespace optpipe {

constexpr int kPlanFileVersion = 2;  // what plan_file_to_json writes; 1 and 2 are read

// What `optpipe plan` was asked: the settings the frameworks' exports carry beside the layout.
struct PlannedFor {
  ModelSpec model;           // the transformer (its name as given: a preset or a path)
  std::string cluster;       // as given, e.g. "8xa100-40gb"
  PlanSpec spec;             // the layout as built: num_microbatches and mem_budget_bytes never 0
  int64_t global_batch = 0;  // sequences an iteration: microbatches × microbatch size × dp
};

struct PlanFile {
  Schedule schedule;
  std::optional<Problem> problem;         // the problem the schedule runs on (its placement and cut)
  std::optional<PlannedFor> planned_for;  // absent: planned from a problem file, not a model
  std::string optpipe_version;            // of the writer; "" in version 1 files
  std::string command_line;               // that wrote it, as typed; may be empty
  int format_version = kPlanFileVersion;  // as read
};

// optpipe's own version ("0.1.0"), as CMake's project() gives it.
const char* optpipe_version();

// Strict, as every reader in json_io.h: unknown fields and wrong types are errors naming the
// field ("problem.stages[3].t_f_us: expected a number"). A problem held is checked, and must be
// the one the schedule runs on: same placement, chunks, devices and microbatches.
Result<PlanFile> plan_file_from_json(const std::string& text);
std::string plan_file_to_json(const PlanFile& f);  // format version 2, every field present

// The problem the file's schedule runs on: the file's own, or `given` re-cut to the schedule
// (problem_for). With both, `given` must be the same problem once re-cut: InvalidInput naming
// where they first differ ("/devices/0/mem_budget_bytes"). Neither: InvalidInput saying the file
// holds none. `given_name` names `given` in errors (a path, or "problem").
Result<Problem> plan_problem(const PlanFile& f, const Problem* given, const std::string& given_name);

}  // namespace optpipe
