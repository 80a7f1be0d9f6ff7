// FabricOptions' checks.
#include <arc/fabric/fabric_options.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/base/detail/host.h>
#include <arc/base/error.h>
#include <arc/fabric/precision.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/detail/lightning_strategy.h>

#include <algorithm>

namespace arc {
namespace {

// "auto" or a name the registry knows (users' own strategies included).
template <typename Registry>
void check_name(const std::string& key, const std::string& value, const Registry& registry) {
  auto allowed = registry.names();
  allowed.insert(allowed.begin(), "auto");
  check_choice(key, value, allowed);
}

}  // namespace

int64_t FabricOptions::threads_per_process(int64_t local_processes) const {
  if (num_threads_ > 0) return num_threads_;
  return std::max<int64_t>(1, usable_cores() / std::max<int64_t>(1, local_processes));
}

void FabricOptions::validate() const {
  check_name("accelerator", accelerator_, accelerator_registry());
  const auto named = cluster::parse_strategy_name(strategy_);
  check_name("strategy", named.name, strategy_registry());
  ARC_CHECK(named.find_unused_parameters.value_or(true) || !ddp_.find_unused_parameters(), "strategy \"", strategy_,
            "\" turns find_unused_parameters off, but find_unused_parameters=true; drop one of them");
  ARC_CHECK(devices_.is_auto || devices_.count >= 1 || devices_.count == -1,
            "devices must be \"auto\", -1 (all) or >= 1, got ", devices_.count);
  ARC_CHECK(num_nodes_ >= 1, "num_nodes must be >= 1, got ", num_nodes_);
  check_choice("precision", precision_, Precision::names());
  for (const auto& callback : callbacks_)
    ARC_CHECK(callback != nullptr, "callbacks holds a null callback; make each with std::make_shared<...>(...)");
  for (const auto& logger : loggers_)
    ARC_CHECK(logger != nullptr, "loggers holds a null logger; make each with std::make_shared<...>(...)");
  ARC_CHECK(num_threads_ >= 0, "num_threads must be >= 0 (0 = all cores), got ", num_threads_);
  check_name("cluster_environment", cluster_environment_, cluster::cluster_registry());
  check_choice("requeue_signal", slurm_.requeue_signal(), cluster::requeue_signal_names());
  ddp_.validate();
}

}  // namespace arc
