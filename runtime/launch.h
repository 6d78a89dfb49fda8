// launch.h — one process per rank on this machine, started and watched the way torchrun does.
//
// Each child is this program again with the same arguments and RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT (and OPTPIPE_RUN_DIR, where it writes its report) in its
// environment. When one rank fails, the others get `grace_s` to stop on their own (they notice
// through their own timeouts) and are then killed, so a launch always ends.
#pragma once

#include <string>
#include <vector>

#include "optpipe/status.h"

namespace optpipe::runtime {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0]: the executable every rank runs
  int world_size = 1;
  std::string run_dir;
  double grace_s = 10;
};

// Ok when every rank exits 0; otherwise a message saying how each rank ended.
Status launch_local(const LaunchSpec& spec);

// When this process was started as one rank: its rank, world size and rendezvous address.
struct RankEnv {
  bool present = false;
  int rank = 0, world_size = 0, master_port = 0;
  int local_rank = 0;        // LOCAL_RANK, else RANK
  int local_world_size = 0;  // LOCAL_WORLD_SIZE (ranks on this machine), else WORLD_SIZE
  std::string master_addr, run_dir;
};
Result<RankEnv> rank_env();

}  // namespace optpipe::runtime
