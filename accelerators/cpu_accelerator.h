// CpuAccelerator: tensors in host memory.
#pragma once

#include <arc/accelerators/accelerator_backend.h>

namespace arc {

/// The CPU; `devices: N` means N processes, each on the CPU.
class CpuAccelerator : public AcceleratorBackend {
 public:
  std::string name() const override { return "cpu"; }
  bool available() const override { return true; }
  int64_t device_count() const override;
  std::vector<c10::Device> select(const Devices& devices) const override;
};

}  // namespace arc
