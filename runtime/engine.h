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
// allocates), so the measured peak is comparable with the prediction. The budget holds whatever
// the timing: an F, R or reload whose bytes would not fit waits for offloads in flight to free
// them (the simulator's order already fits, so this only binds when transfers run late).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device.h"
#include "gpt.h"
#include "optpipe/problem.h"
#include "optpipe/schedule.h"
#include "optpipe/status.h"
#include "records.h"

namespace optpipe::runtime {

struct RankSetup {
  int rank = 0, world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int local_rank = 0, local_world_size = 1;  // this rank's place on its machine: which GPU it takes
  DeviceChoice device = DeviceChoice::kAuto;
};

struct EngineOptions {
  int iterations = 1;
  double lr = 3e-3;
  bool check = false;  // after the first iteration: compare loss and gradients with reference_gradients()
  // Called before each compute op with the number already run (a test hook for fault injection).
  std::function<void(int iteration, int ops_done)> before_op;
};

// This process's place among the ranks, and its connection to the others.
struct Group {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;  // barriers, the loss, and the hops unless NCCL carries them
  c10::intrusive_ptr<c10d::Store> store;          // the rendezvous, for further process groups (NCCL)
  int rank = 0, world_size = 1;
  double timeout_s = 60;  // for every wait on a peer
  at::Device device{at::kCPU};
  bool hops_over_nccl = false;  // every rank has a GPU of its own (agreed by all): NCCL carries the hops
};

// Joins the group of `setup.world_size` ranks (rank 0 serves the TCPStore) on the device
// `setup` chooses; gives up after `timeout_s`, and so does every operation on the group.
Result<Group> join_group(const RankSetup& setup, double timeout_s);

// Waits for a c10d operation; on timeout or a peer's failure throws std::runtime_error
// "<what>: <the first line of c10d's message>".
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, double timeout_s, const std::string& what);

// The CPU stand-in for a caching allocator: glibc keeps freed memory (no trim, one arena for
// every thread, mmap only above 32 MiB), so tensors reuse pages that are already mapped. Call
// before any thread starts. Without it every stash pays page faults (measured here: a 4.8 MiB
// stash took 21 ms to build instead of 3.5 ms; a 2.4 MiB offload copy 7–18 ms instead of 0.2).
void keep_freed_memory();
// Maps `bytes` of heap now, so that the first iteration does not pay the faults either.
void reserve_heap(int64_t bytes);

// `problem` must already be cut for the schedule's placement and the schedule validated.
Result<RankReport> run_rank(const Problem& problem, const Schedule& schedule, const GptConfig& cfg, const Group& group,
                            const EngineOptions& options);

}  // namespace optpipe::runtime
