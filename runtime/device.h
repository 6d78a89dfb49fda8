// device.h — where a rank computes: the CPU, or one GPU when the runtime was built against a
// CUDA LibTorch (OPTPIPE_RUNTIME_CUDA; scripts/setup.sh --cuda). device_cuda.cpp holds the
// CUDA half; device_cpu.cpp stands in for it in a CPU-only build, so callers need no #ifdef.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "optpipe/status.h"

namespace optpipe::runtime {

enum class DeviceChoice { kAuto, kCpu, kCuda };  // auto: a GPU when one is visible, else the CPU

bool cuda_built();        // this runtime was compiled against a CUDA LibTorch
int cuda_device_count();  // GPUs this process sees (0 in a CPU-only build)

// Sets `device` to that of the rank with `local_rank` on this machine: GPU local_rank mod the
// visible GPUs, so ranks share GPUs when there are fewer GPUs than ranks. kCuda without a GPU
// (or in a CPU-only build) is an error that says which.
Status rank_device(DeviceChoice choice, int local_rank, at::Device* device);

// "cpu", or "cuda:1 (NVIDIA H200)".
std::string device_name(const at::Device& device);

// Waits until everything queued on `device` has run (nothing to wait for on the CPU).
void synchronize(const at::Device& device);

// The CUDA caching allocator's peaks since the last reset (zeros on the CPU).
struct AllocatorPeaks {
  int64_t allocated_bytes = 0;  // tensors alive at once
  int64_t reserved_bytes = 0;   // what the allocator held from the driver, cached blocks included
};
void reset_allocator_peaks(const at::Device& device);
AllocatorPeaks allocator_peaks(const at::Device& device);

// An empty host tensor like `like` that `device` copies into asynchronously: page-locked for a
// GPU, ordinary memory for the CPU.
at::Tensor host_buffer(const at::Tensor& like, const at::Device& device);

}  // namespace optpipe::runtime
