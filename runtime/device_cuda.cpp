// device.h for a runtime built against a CUDA LibTorch.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "device.h"

namespace optpipe::runtime {

bool cuda_built() { return true; }
int cuda_device_count() { return static_cast<int>(c10::cuda::device_count()); }

Status rank_device(DeviceChoice choice, int local_rank, at::Device* device) {
  const int gpus = cuda_device_count();
  if (choice == DeviceChoice::kCpu || (choice == DeviceChoice::kAuto && gpus == 0)) {
    *device = at::Device(at::kCPU);
    return Status::Ok();
  }
  if (gpus == 0) return Status::Invalid("--device cuda: no GPU is visible to this process");
  const auto index = static_cast<c10::DeviceIndex>(local_rank % gpus);
  c10::cuda::set_device(index);
  *device = at::Device(at::kCUDA, index);
  return Status::Ok();
}

std::string device_name(const at::Device& device) {
  if (!device.is_cuda()) return device.str();
  return device.str() + " (" + at::cuda::getDeviceProperties(device.index())->name + ")";
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

void reset_allocator_peaks(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

AllocatorPeaks allocator_peaks(const at::Device& device) {
  if (!device.is_cuda()) return {};
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr size_t kAll = 0;  // StatType::AGGREGATE: every pool
  return {stats.allocated_bytes[kAll].peak, stats.reserved_bytes[kAll].peak};
}

at::Tensor host_buffer(const at::Tensor& like, const at::Device& device) {
  return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(device.is_cuda()));
}

}  // namespace optpipe::runtime
