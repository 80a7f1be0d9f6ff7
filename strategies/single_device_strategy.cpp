// SingleDeviceStrategy.
#include <arc/strategies/single_device_strategy.h>

namespace arc {

std::shared_ptr<cluster::ClusterEnvironment> SingleDeviceStrategy::launch(const LaunchRequest& request) {
  ARC_CHECK(request.num_nodes == 1, "strategy 'single_device' runs on one node, got num_nodes=", request.num_nodes,
            "; use a distributed strategy for several nodes");
  return nullptr;
}

void SingleDeviceStrategy::setup(const StrategyPlan& plan) {
  ARC_CHECK(plan.devices.size() == 1, "strategy 'single_device' uses one device, but devices selects ",
            plan.devices.size(), "; set devices to 1 or choose a distributed strategy");
  device_ = plan.devices.front();
  plan.accelerator->setup_device(device_);
}

}  // namespace arc
