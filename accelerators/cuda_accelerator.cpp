// CudaAccelerator. Memory statistics need the CUDA headers, which only a CUDA build of LibTorch
// brings (ARC_WITH_CUDA); without them no CUDA device can be selected in the first place.
#include <arc/accelerators/cuda_accelerator.h>

#include <c10/core/DeviceGuard.h>
#include <torch/cuda.h>

#ifdef ARC_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace arc {

bool CudaAccelerator::available() const { return torch::cuda::is_available(); }

int64_t CudaAccelerator::device_count() const { return static_cast<int64_t>(torch::cuda::device_count()); }

void CudaAccelerator::require_available() const {
  ARC_CHECK(device_count() > 0, "accelerator 'gpu' was requested but no CUDA device is available (this LibTorch ",
            torch::cuda::is_available() ? "sees no device" : "has no usable CUDA",
            "); set accelerator to \"cpu\", or run on a machine with an NVIDIA GPU and a CUDA build of LibTorch");
}

std::vector<c10::Device> CudaAccelerator::select(const Devices& devices) const {
  require_available();
  const int64_t present = device_count();
  std::vector<int64_t> indices = devices.indices;
  if (indices.empty()) {
    const int64_t wanted = count(devices);
    ARC_CHECK(wanted <= present, "devices=", wanted, " asks for more GPUs than the ", present,
              " visible ones; lower devices or check CUDA_VISIBLE_DEVICES",
              chosen_by_auto_ ? ", or set accelerator to \"cpu\" for " + std::to_string(wanted) +
                                    " processes on the CPU (accelerator \"auto\" took the GPU)"
                              : std::string());
    for (int64_t i = 0; i < wanted; ++i) indices.push_back(i);
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

std::map<std::string, double> CudaAccelerator::device_stats(c10::Device device) {
#ifdef ARC_WITH_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  std::map<std::string, double> out;
  // Index 0 of each StatArray is the aggregate over the small and large pools ("all").
  const auto add = [&](const std::string& name, const auto& array) {
    out[name + ".all.current"] = static_cast<double>(array[0].current);
    out[name + ".all.peak"] = static_cast<double>(array[0].peak);
  };
  add("allocated_bytes", stats.allocated_bytes);
  add("reserved_bytes", stats.reserved_bytes);
  add("active_bytes", stats.active_bytes);
  out["num_alloc_retries"] = static_cast<double>(stats.num_alloc_retries);
  out["num_ooms"] = static_cast<double>(stats.num_ooms);
  return out;
#else
  ARC_FAIL("device statistics for ", device.str(), " need a CUDA build of LibTorch; this one has no CUDA");
#endif
}

}  // namespace arc
