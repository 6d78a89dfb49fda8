// One rank's hops on a GPU (hops_cuda.h).
#include "hops_cuda.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <chrono>
#include <set>

#include "check.h"
#include "device.h"

namespace optpipe::runtime {

Hops::Hops(const Problem& p, const Schedule& s, const GptConfig& cfg, const Group& g)
    : g_(g),
      order_(message_order(p, s, g.rank)),
      shape_{cfg.microbatch_size, cfg.model.seq_len, cfg.model.hidden},
      me_("rank " + std::to_string(g.rank)) {
  if (g.hops_over_nccl) connect(p);
}

void Hops::begin_iteration() {
  next_.clear();
  posted_.clear();
  ready_.clear();
  sends_.clear();
  if (g_.hops_over_nccl) {
    pump();
  } else {
    for (const auto& [peer, msgs] : order_)
      for (const Message& m : msgs)
        if (!m.send) {
          at::Tensor host = at::empty(shape_, at::TensorOptions().pinned_memory(true));
          std::vector<at::Tensor> bufs{host};
          posted_[m.tag] = {host, g_.pg->recv(bufs, m.peer, m.tag)};
        }
  }
}

void Hops::send(const at::Tensor& t, int peer, int tag) {
  if (g_.hops_over_nccl) {
    ready_[tag] = t.contiguous();
    pump();
    return;
  }
  std::vector<at::Tensor> bufs{t.to(at::kCPU)};  // waits for the compute stream
  sends_.emplace_back(bufs[0], g_.pg->send(bufs, peer, tag));
}

at::Tensor Hops::receive(int tag, const std::string& what) {
  if (g_.hops_over_nccl) pump();
  auto it = posted_.find(tag);
  OPTPIPE_CHECK(it != posted_.end(), what + ": its receive was not posted (the message order is broken)");
  if (g_.hops_over_nccl) {
    it->second.second->wait();  // the current stream waits on NCCL's
    return it->second.first;
  }
  wait_work(it->second.second, g_.timeout_s, what);
  return it->second.first.to(g_.device, /*non_blocking=*/true);
}

void Hops::end_iteration() {
  if (g_.hops_over_nccl) {
    pump();
    for (const auto& [peer, msgs] : order_)
      OPTPIPE_CHECK(next_[peer] == msgs.size(),
                    me_ + ": a message to or from rank " + std::to_string(peer) + " was never posted");
  }
  for (auto& [t, work] : sends_) wait_work(work, g_.timeout_s, me_ + ": sending to a peer");
}

// NCCL connects a pair of ranks on its first message, blocking both hosts until both arrive;
// so every pair connects before the first iteration, one pair at a time in one global order.
void Hops::connect(const Problem& p) {
  std::set<std::pair<int, int>> pairs;
  for (int st = 0; st + 1 < p.num_stages(); st++) {
    const int a = p.device_of(st), b = p.device_of(st + 1);
    if (a != b) pairs.insert({std::min(a, b), std::max(a, b)});
  }
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = std::chrono::milliseconds(static_cast<int64_t>(g_.timeout_s * 1000));
  nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", g_.store), g_.rank,
                                                      g_.world_size, options);
  for (const auto& [lo, hi] : pairs) {
    if (g_.rank != lo && g_.rank != hi) continue;
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().device(g_.device))};
    auto work = g_.rank == lo ? nccl_->send(one, hi, 0) : nccl_->recv(one, lo, 0);
    work->wait();
    synchronize(g_.device);
  }
}

// Posts each pair's next messages while they can be: receives at once, sends once ready.
void Hops::pump() {
  for (const auto& [peer, msgs] : order_) {
    size_t& k = next_[peer];
    for (; k < msgs.size(); k++) {
      const Message& m = msgs[k];
      if (m.send) {
        auto it = ready_.find(m.tag);
        if (it == ready_.end()) break;
        std::vector<at::Tensor> bufs{it->second};
        sends_.emplace_back(it->second, nccl_->send(bufs, peer, m.tag));
        ready_.erase(it);
      } else {
        std::vector<at::Tensor> bufs{at::empty(shape_, at::TensorOptions().device(g_.device))};
        posted_[m.tag] = {bufs[0], nccl_->recv(bufs, peer, m.tag)};
      }
    }
  }
}

}  // namespace optpipe::runtime
