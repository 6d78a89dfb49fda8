// profile.h — measures the runtime's model on this machine and turns it into a Problem.
//
// Every rank (one process per device, as in a run) times the chunks it holds at the same time
// as the others, so the figures carry the contention a run has: the median of F, B, W and R on
// one compute thread, and the exact bytes F keeps, W still needs and a recompute keeps. Ranks 0
// and 1 time half the median round trip of one activation over c10d gloo; every rank the rate
// and latency of a stash-sized host copy (the slowest is kept). Static bytes: 16 per parameter
// (fp32 weights, gradients and two Adam moments). Workspace is not measured (0).
//
//   Result<Problem> share = profile_rank(cfg, spec, group);         // on each rank
//   Result<Problem> p = merge_profiles(spec, shares);               // on the launcher
//   write_text_file("profile.json", profile_to_json(p.value));     // what `plan --profile` reads
#pragma once

#include <cstdint>
#include <vector>

#include "engine.h"
#include "gpt.h"
#include "optpipe/problem.h"
#include "optpipe/status.h"

namespace optpipe::runtime {

struct ProfileSpec {
  int num_devices = 2;
  int num_microbatches = 8;  // only copied into the problem
  Placement placement = Placement::kLinear;
  int chunks_per_device = 1;
  int repetitions = 7;           // timed rounds (after one warm-up) over up to 4 microbatches; the median is kept
  int64_t mem_budget_bytes = 0;  // per device; 0: enough for every activation at once
};

Status check_profile_spec(const ProfileSpec& spec);

// This rank's share: its stages and its device filled in, the rest zero.
Result<Problem> profile_rank(const GptConfig& cfg, const ProfileSpec& spec, const Group& group);

// The problem from every rank's share (index = rank).
Result<Problem> merge_profiles(const ProfileSpec& spec, const std::vector<Problem>& shares);

}  // namespace optpipe::runtime
