// SingleDeviceStrategy: one process, one device.
#pragma once

#include <arc/strategies/strategy.h>

namespace arc {

/// Trains in this process on one device (cpu or cuda:N).
class SingleDeviceStrategy : public Strategy {
 public:
  std::string name() const override { return "single_device"; }
  std::shared_ptr<cluster::ClusterEnvironment> launch(const LaunchRequest& request) override;
  void setup(const StrategyPlan& plan) override;
  torch::Device root_device() const override { return device_; }

 private:
  torch::Device device_{torch::kCPU};
};

}  // namespace arc
