// CudaAccelerator: NVIDIA GPUs through LibTorch's CUDA build. Compiled in CPU-only builds too,
// where it reports that no CUDA device is available.
#pragma once

#include <arc/accelerators/accelerator_backend.h>

namespace arc {

/// `cuda:N` devices; honours CUDA_VISIBLE_DEVICES through the CUDA runtime.
class CudaAccelerator : public AcceleratorBackend {
 public:
  /// `chosen_by_auto`: accelerator "auto" took the GPU, so a count beyond the GPUs may have meant
  /// processes on the CPU, which the error then says how to ask for.
  explicit CudaAccelerator(bool chosen_by_auto = false) : chosen_by_auto_(chosen_by_auto) {}
  std::string name() const override { return "cuda"; }
  bool available() const override;
  int64_t device_count() const override;
  void require_available() const override;
  std::vector<c10::Device> select(const Devices& devices) const override;
  void setup_device(c10::Device device) override;
  /// The caching allocator's byte counts under torch.cuda.memory_stats() names
  /// ("allocated_bytes.all.current", ...), and its retry and out-of-memory counts.
  std::map<std::string, double> device_stats(c10::Device device) override;

 private:
  bool chosen_by_auto_;
};

}  // namespace arc
