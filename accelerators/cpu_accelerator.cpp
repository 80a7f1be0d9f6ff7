// CpuAccelerator.
#include <arc/accelerators/cpu_accelerator.h>

#include <thread>

namespace arc {

int64_t CpuAccelerator::device_count() const {
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

std::vector<c10::Device> CpuAccelerator::select(const Devices& devices) const {
  ARC_CHECK(devices.indices.empty(),
            "accelerator 'cpu' takes devices as a process count, not indices; write devices: ", devices.indices.size());
  const int64_t count = devices.is_auto ? 1 : devices.count == -1 ? device_count() : devices.count;
  return std::vector<c10::Device>(static_cast<size_t>(count), c10::Device(c10::kCPU));
}

}  // namespace arc
