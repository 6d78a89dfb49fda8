// engine.h — one pipeline rank: runs its device's part of a schedule on the GPT chunks it holds.
//
// The compute stream is the calling thread and runs the device's compute ops in schedule order;
// a device-to-host worker runs the offloads in order (each after its F), a host-to-device worker
// the reloads (each once its anchor op has started), and B waits for its reload. Activations and
// gradients travel over c10d (ProcessGroupGloo on a TCPStore): every receive of an iteration is
// posted when it begins and every send as soon as its op ends, so a schedule that simulates
// without deadlock runs without deadlock. Every wait has a timeout: a peer that died or stalls
// turns into an error naming the op, the peer and the time waited.
//
// Live activation bytes are counted where the simulator counts them (F adds its stash, a
// recompute keeps only the input, B swaps the stash for what W needs, offload frees, reload
// allocates), so the measured peak is comparable with the prediction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"
#include "gpt.h"
#include "records.h"

namespace optpipe::runtime {

struct RankSetup {
  int rank = 0, world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

struct EngineOptions {
  int iterations = 1;
  double lr = 1e-3;
  double timeout_s = 60;  // any wait on a peer (connect, receive, barrier)
  bool check = false;     // after the first iteration: compare loss and gradients with reference_gradients()
  // Called before each compute op with the number already run (a test hook for fault injection).
  std::function<void(int iteration, int ops_done)> before_op;
};

// `problem` must already be cut for the schedule's placement and the schedule validated.
Result<RankReport> run_rank(const Problem& problem, const Schedule& schedule, const GptConfig& cfg,
                            const RankSetup& setup, const EngineOptions& options);


}  // namespace optpipe::runtime
