// TorchElasticEnvironment: processes started by torchrun.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// TORCHELASTIC_RUN_ID, RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
/// TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT.
class TorchElasticEnvironment : public ClusterEnvironment {
 public:
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "torchelastic"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override;
  int64_t main_port() const override;
  int64_t world_size() const override;
  int64_t global_rank() const override;
  std::string rank_variables() const override { return "RANK and WORLD_SIZE"; }
  int64_t local_rank() const override;
  int64_t node_rank() const override;
  int64_t local_world_size() const override;
  /// TORCHELASTIC_USE_AGENT_STORE=True.
  bool launcher_hosts_store() const override;
  std::optional<std::string> parent_launcher() const override { return "torchrun's agent"; }
  /// TORCHELASTIC_RESTART_COUNT.
  int64_t restart_count() const override;
};

}  // namespace arc::cluster
