// The accelerator registry and "auto" resolution.
#include <arc/accelerators/accelerator_backend.h>

#include <arc/accelerators/cpu_accelerator.h>
#include <arc/accelerators/cuda_accelerator.h>

namespace arc {

int64_t AcceleratorBackend::count(const Devices& devices) const {
  require_available();
  if (devices.is_auto) return auto_device_count();
  return devices.count == -1 ? device_count() : devices.count;
}

Registry<AcceleratorBackend>& accelerator_registry() {
  static Registry<AcceleratorBackend> registry = [] {
    Registry<AcceleratorBackend> r("accelerator");
    r.add_class<CpuAccelerator>("cpu");
    r.add_class<CudaAccelerator>("cuda");
    r.add_class<CudaAccelerator>("gpu");
    return r;
  }();
  return registry;
}

std::shared_ptr<AcceleratorBackend> resolve_accelerator(const std::string& name) {
  if (name != "auto") return accelerator_registry().create(name);
  auto cuda = std::make_shared<CudaAccelerator>(/*chosen_by_auto=*/true);
  if (cuda->available()) return cuda;
  return accelerator_registry().create("cpu");
}

}  // namespace arc
