// profile.h — measures the runtime's model on this machine and turns it into a Problem.
//
// Per chunk (the cut the runtime uses for the placement): the median time of F, B, W and R on
// one compute thread, and the exact bytes F keeps, W still needs and a recompute keeps. Between
// ranks: half the median round trip of one activation over c10d gloo. To the host: the copy
// rate and latency of a stash-sized transfer. Static bytes: 16 per parameter (fp32 weights,
// gradients and two Adam moments). Workspace is not measured (0).
//
//   Result<Problem> p = profile_model(cfg, {.num_devices = 2, .num_microbatches = 8});
//   write_text_file("profile.json", profile_to_json(p.value));   // what `plan --profile` reads
#pragma once

#include <cstdint>

#include "gpt.h"
#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe::runtime {

struct ProfileSpec {
  int num_devices = 2;
  int num_microbatches = 8;  // only copied into the problem
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;
  int repetitions = 7;            // timed runs per op (after one warm-up), the median is kept
  int64_t mem_budget_bytes = 0;   // per device; 0: enough for every activation at once
};

Result<Problem> profile_model(const GptConfig& cfg, const ProfileSpec& spec);

}  // namespace optpipe::runtime
