// validate.h — is a schedule correct for a problem? Every problem found names its device and op.
//
// Checks, in order: every op exactly once, on the device that holds its stage, in the right list;
// each stage-microbatch complete (F; B and W, or BW; R or Offload+Reload at most); same-device
// dependencies in order; reload anchors on the same device and before the backward they feed.
// If all that holds, the schedule is simulated: a deadlock across devices is reported with the op
// each blocked device waits to run, and a device whose memory peak exceeds its budget is reported
// with the peak and the op that reaches it — at the problem's durations, or under the worst
// timing the schedule allows (any_timing.h).
//
//   Validation v = validate(problem, schedule);
//   if (!v.ok()) for (const Issue& i : v.issues) puts(i.message.c_str());
//   else use(v.sim.timeline);               // the simulation comes with it
#pragma once

#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/simulate.h"

namespace optpipe {

struct Issue {
  int device = -1;  // −1: not about one device
  Op op;            // the op concerned, when has_op
  bool has_op = false;
  std::string message;  // complete sentence naming device and op
};

struct ValidateOptions {
  bool check_memory_budget = true;
  // With it: also that each device fits under any timing (any_timing.h), not only at the
  // problem's durations.
  bool check_any_timing = true;
  SimOptions sim;
};

struct [[nodiscard]] Validation {
  std::vector<Issue> issues;
  SimResult sim;  // filled when the structural checks pass

  bool ok() const { return issues.empty(); }
  std::string summary() const;  // the issues, one per line
};

Validation validate(const Problem& p, const Schedule& s, const ValidateOptions& options = {});

}  // namespace optpipe
