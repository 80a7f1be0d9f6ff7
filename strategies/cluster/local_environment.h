// LocalEnvironment: processes on this machine, started by hand or by Arclight's ddp_spawn launcher.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// MASTER_ADDR (default 127.0.0.1), MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK; all optional for one process.
class LocalEnvironment : public ClusterEnvironment {
 public:
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "local"; }
  bool creates_processes_externally() const override;
  /// Processes started by hand with RANK or WORLD_SIZE need LOCAL_RANK too, as in Lightning.
  std::string no_launcher_reason() const override;
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
