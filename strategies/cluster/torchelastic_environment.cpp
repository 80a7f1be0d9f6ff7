// TorchElasticEnvironment.
#include <arc/strategies/cluster/torchelastic_environment.h>

#include <arc/base/error.h>

namespace arc::cluster {

bool TorchElasticEnvironment::detect() {
  return env("TORCHELASTIC_RUN_ID").has_value() && env("RANK").has_value() && env("LOCAL_RANK").has_value() &&
         env("WORLD_SIZE").has_value();
}

std::string TorchElasticEnvironment::main_address() const {
  const auto address = env("MASTER_ADDR");
  ARC_CHECK(address.has_value(), "MASTER_ADDR is not set under torchrun; torchrun sets it, so check the launch");
  return *address;
}

int64_t TorchElasticEnvironment::main_port() const { return required_master_port("torchrun"); }
int64_t TorchElasticEnvironment::world_size() const { return env_int("WORLD_SIZE"); }
int64_t TorchElasticEnvironment::global_rank() const { return env_int("RANK"); }
int64_t TorchElasticEnvironment::local_rank() const { return env_int("LOCAL_RANK"); }
int64_t TorchElasticEnvironment::node_rank() const { return env_int_or("GROUP_RANK", 0); }
int64_t TorchElasticEnvironment::local_world_size() const { return env_int_or("LOCAL_WORLD_SIZE", world_size()); }

bool TorchElasticEnvironment::launcher_hosts_store() const {
  return env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
}

int64_t TorchElasticEnvironment::restart_count() const { return env_int_or("TORCHELASTIC_RESTART_COUNT", 0); }

}  // namespace arc::cluster
