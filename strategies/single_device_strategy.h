// SingleDeviceStrategy: one process, one device.
#pragma once

#include <arc/strategies/strategy.h>

namespace arc {

/// Trains in this process on one device (cpu or cuda:N).
class SingleDeviceStrategy : public Strategy {
 public:
  std::string name() const override { return "single_device"; }
  void setup(AcceleratorBackend& accelerator, const TrainerOptions& options) override;
  torch::Device root_device() const override { return device_; }

 private:
  torch::Device device_{torch::kCPU};
};

}  // namespace arc
