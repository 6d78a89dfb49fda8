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

// Every rank computes on a GPU or every rank on the CPU; NCCL carries the hops only when every
// rank has a GPU of its own (NCCL cannot connect two ranks on one GPU).
Status agree_on_devices(const RankSetup& setup, Group* group) {
  const bool cuda = group->device.is_cuda();
  const bool own_gpu = cuda && setup.local_world_size <= cuda_device_count();
  std::vector<at::Tensor> flags{at::tensor({int64_t{cuda}, int64_t{own_gpu}, -int64_t{cuda}})};
  c10d::AllreduceOptions min;
  min.reduceOp = c10d::ReduceOp::MIN;
  wait_work(group->pg->allreduce(flags, min), group->timeout_s,
            "rank " + std::to_string(group->rank) + ": agreeing on devices");
  const int64_t* f = flags[0].data_ptr<int64_t>();
  const bool all_cuda = f[0] == 1, any_cuda = f[2] == -1;
  if (all_cuda != any_cuda)
    return Status::Invalid("rank " + std::to_string(group->rank) +
                           ": some ranks compute on a GPU and others on the CPU (give --device to all)");
  group->hops_over_nccl = all_cuda && f[1] == 1;
  return Status::Ok();
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
  at::Device device(at::kCPU);
  if (Status st = rank_device(setup.device, setup.local_rank, &device); !st.ok())
    return R::Error(Status::Invalid("rank " + std::to_string(setup.rank) + ": " + st.message));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(setup.master_port);
    so.isServer = setup.rank == 0;
    so.numWorkers = setup.world_size;
    so.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(setup.master_addr, so);
    auto pg_options = c10d::ProcessGroupGloo::Options::create(timeout);
    pg_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(setup.master_addr));
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, setup.rank, setup.world_size, pg_options);
    Group group{pg, store, setup.rank, setup.world_size, timeout_s, device};
    if (Status st = agree_on_devices(setup, &group); !st.ok()) return R::Error(st);
    return R::Of(std::move(group));
  } catch (const std::exception& e) {
    return R::Error(Status::Invalid("rank " + std::to_string(setup.rank) + ": cannot join the process group at " +
                                    setup.master_addr + ":" + std::to_string(setup.master_port) + " within " +
                                    seconds(timeout_s) + ": " + first_line(e.what())));
  }
}

}  // namespace optpipe::runtime
