// The rank's connection to its peers (engine.h): joining the group, and waiting on c10d work
// so that a dead or stalled peer becomes an error instead of a hang.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <stdexcept>

#include "engine.h"
#include "timeouts.h"

namespace optpipe::runtime {

namespace {

// c10 appends a backtrace to its messages: the first line says what happened.
std::string first_line(std::string msg) {
  if (size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

}  // namespace

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, double timeout_s, const std::string& what) {
  try {
    work->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": " + first_line(e.what()));
  }
}

Result<Group> join_group(const RankSetup& setup, double timeout_s) {
  using R = Result<Group>;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(setup.master_port);
    so.isServer = setup.rank == 0;
    so.numWorkers = setup.world_size;
    so.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(setup.master_addr, so);
    auto pg_options = c10d::ProcessGroupGloo::Options::create(timeout);
    pg_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(setup.master_addr));
    return R::Of(Group{c10::make_intrusive<c10d::ProcessGroupGloo>(store, setup.rank, setup.world_size, pg_options),
                       setup.rank, setup.world_size, timeout_s});
  } catch (const std::exception& e) {
    return R::Error(Status::Invalid("rank " + std::to_string(setup.rank) + ": cannot join the process group at " +
                                    setup.master_addr + ":" + std::to_string(setup.master_port) + " within " +
                                    seconds(timeout_s) + ": " + first_line(e.what())));
  }
}

}  // namespace optpipe::runtime
