// SingleDeviceStrategy.
#include <arc/strategies/single_device_strategy.h>

namespace arc {

void SingleDeviceStrategy::setup(AcceleratorBackend& accelerator, const TrainerOptions& options) {
  ARC_CHECK(options.num_nodes() == 1, "strategy 'single_device' runs on one node, got num_nodes=", options.num_nodes(),
            "; use a distributed strategy for several nodes");
  const auto devices = accelerator.select(options.devices());
  ARC_CHECK(devices.size() == 1, "strategy 'single_device' uses one device, but devices selects ", devices.size(),
            "; set devices to 1 or choose a distributed strategy");
  device_ = devices.front();
  accelerator.setup_device(device_);
}

}  // namespace arc
