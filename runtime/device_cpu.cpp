// device.h for a runtime built against a CPU-only LibTorch.
#include "device.h"

namespace optpipe::runtime {

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

Status rank_device(DeviceChoice choice, int local_rank, at::Device* device) {
  if (choice == DeviceChoice::kCuda)
    return Status::Invalid(
        "--device cuda: this optpipe-runtime was built against a CPU-only LibTorch (scripts/setup.sh --cuda "
        "builds one against CUDA LibTorch)");
  *device = at::Device(at::kCPU);
  return Status::Ok();
}

std::string device_name(const at::Device& device) { return device.str(); }
void synchronize(const at::Device& device) {}
void reset_allocator_peaks(const at::Device& device) {}
AllocatorPeaks allocator_peaks(const at::Device& device) { return {}; }
at::Tensor host_buffer(const at::Tensor& like, const at::Device& device) {
  return at::empty(like.sizes(), like.options().device(at::kCPU));
}

}  // namespace optpipe::runtime
