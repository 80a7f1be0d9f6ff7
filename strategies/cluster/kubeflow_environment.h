// KubeflowEnvironment: one process per pod of a Kubeflow PyTorchJob.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// KUBERNETES_PORT with MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; one process per node.
class KubeflowEnvironment : public ClusterEnvironment {
 public:
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "kubeflow"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override;
  int64_t main_port() const override;
  int64_t world_size() const override;
  int64_t global_rank() const override;
  std::string rank_variables() const override { return "RANK and WORLD_SIZE"; }
  int64_t local_rank() const override;
  int64_t node_rank() const override;
  int64_t local_world_size() const override;
};

}  // namespace arc::cluster
