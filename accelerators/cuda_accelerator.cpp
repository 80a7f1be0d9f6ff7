// CudaAccelerator.
#include <arc/accelerators/cuda_accelerator.h>

#include <c10/core/DeviceGuard.h>
#include <torch/cuda.h>

namespace arc {

bool CudaAccelerator::available() const { return torch::cuda::is_available(); }

int64_t CudaAccelerator::device_count() const { return static_cast<int64_t>(torch::cuda::device_count()); }

std::vector<c10::Device> CudaAccelerator::select(const Devices& devices) const {
  const int64_t present = device_count();
  ARC_CHECK(present > 0, "accelerator 'gpu' was requested but no CUDA device is available (this LibTorch ",
            torch::cuda::is_available() ? "sees no device" : "has no usable CUDA",
            "); set accelerator to \"cpu\", or run on a machine with an NVIDIA GPU and a CUDA build of LibTorch");
  std::vector<int64_t> indices = devices.indices;
  if (indices.empty()) {
    const int64_t count = devices.is_auto || devices.count == -1 ? present : devices.count;
    ARC_CHECK(count <= present, "devices=", count, " asks for more GPUs than the ", present,
              " visible ones; lower devices or check CUDA_VISIBLE_DEVICES");
    for (int64_t i = 0; i < count; ++i) indices.push_back(i);
  }
  std::vector<c10::Device> out;
  for (const int64_t index : indices) {
    ARC_CHECK(index < present, "device index ", index, " is not among the ", present, " visible GPUs (0..", present - 1,
              "); fix devices or CUDA_VISIBLE_DEVICES");
    out.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return out;
}

void CudaAccelerator::setup_device(c10::Device device) { c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(device); }

}  // namespace arc
