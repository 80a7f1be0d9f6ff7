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
  int64_t auto_device_count() const override { return 1; }
  std::vector<c10::Device> select(const Devices& devices) const override;
  /// "cpu_percent" (the machine's busy share since the previous call, or since boot), "cpu_vm_percent"
  /// (memory in use), "cpu_swap_percent" and "cpu_rss_mb" (this process's resident memory).
  std::map<std::string, double> device_stats(c10::Device device) override;

 private:
  // /proc/stat's busy and total jiffies at the previous call.
  uint64_t busy_before_ = 0;
  uint64_t total_before_ = 0;
};

}  // namespace arc
