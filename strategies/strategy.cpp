// Strategy defaults, the strategy registry and "auto" resolution.
#include <arc/strategies/strategy.h>

#include <arc/core/train_module.h>
#include <arc/strategies/single_device_strategy.h>

namespace arc {

void Strategy::setup_module(TrainModule& module) { module.to(root_device()); }

void Strategy::backward(const torch::Tensor& loss) { loss.backward(); }

Registry<Strategy>& strategy_registry() {
  static Registry<Strategy> registry = [] {
    Registry<Strategy> r("strategy");
    r.add("single_device", [] { return std::make_shared<SingleDeviceStrategy>(); });
    return r;
  }();
  return registry;
}

std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices) {
  if (name != "auto") return strategy_registry().create(name);
  ARC_CHECK(devices == 1, "devices=", devices,
            " needs a multi-process strategy, and none is registered yet (known: ", join(strategy_registry().names()),
            "); set devices to 1");
  return strategy_registry().create("single_device");
}

}  // namespace arc
