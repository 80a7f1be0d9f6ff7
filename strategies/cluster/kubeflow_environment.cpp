// KubeflowEnvironment.
#include <arc/strategies/cluster/kubeflow_environment.h>

#include <arc/base/error.h>

namespace arc::cluster {

bool KubeflowEnvironment::detect() {
  return env("KUBERNETES_PORT").has_value() && env("MASTER_ADDR").has_value() && env("MASTER_PORT").has_value() &&
         env("WORLD_SIZE").has_value() && env("RANK").has_value();
}

std::string KubeflowEnvironment::main_address() const {
  const auto address = env("MASTER_ADDR");
  ARC_CHECK(address.has_value(), "MASTER_ADDR is not set; the Kubeflow PyTorchJob operator sets it, so check the job");
  return *address;
}

int64_t KubeflowEnvironment::main_port() const { return required_master_port("the Kubeflow PyTorchJob operator"); }
int64_t KubeflowEnvironment::world_size() const { return env_int("WORLD_SIZE"); }
int64_t KubeflowEnvironment::global_rank() const { return env_int("RANK"); }
int64_t KubeflowEnvironment::local_rank() const { return 0; }
int64_t KubeflowEnvironment::node_rank() const { return global_rank(); }
int64_t KubeflowEnvironment::local_world_size() const { return 1; }

}  // namespace arc::cluster
