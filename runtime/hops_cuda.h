// hops_cuda.h — private to the GPU engine (engine_cuda.cpp): one rank's hops, the activations and
// gradients it sends to and receives from its peers. NCCL when every rank has a GPU of its own,
// posted in messages.h's order; else gloo through pinned host memory (NCCL cannot connect two ranks
// on one GPU). Compiled only against a CUDA LibTorch (OPTPIPE_RUNTIME_CUDA).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine.h"
#include "messages.h"

namespace optpipe::runtime {

class Hops {
 public:
  Hops(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& g);

  void begin_iteration();
  // `t` for the consumer `tag` on `peer`, enqueued on the current (compute) stream.
  void send(const at::Tensor& t, int peer, int tag);
  // The tensor for the consumer `tag`; the compute stream waits for it, the host does not
  // (except through gloo, where it arrives in host memory).
  at::Tensor receive(int tag, const std::string& what);
  // Every message of the iteration posted; the sends through gloo waited for.
  void end_iteration();

 private:
  void connect(const Problem& p);
  void pump();

  const Group& g_;
  std::map<int, std::vector<Message>> order_;
  std::vector<int64_t> shape_;
  std::string me_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;
  std::map<int, size_t> next_;                                                   // per peer: first message not posted
  std::map<int, std::pair<at::Tensor, c10::intrusive_ptr<c10d::Work>>> posted_;  // receives by tag
  std::map<int, at::Tensor> ready_;                                              // sends waiting for their turn
  std::vector<std::pair<at::Tensor, c10::intrusive_ptr<c10d::Work>>> sends_;     // kept alive until done
};

}  // namespace optpipe::runtime
