// MpiEnvironment: processes started by mpirun (OpenMPI, or MPICH-style PMI).
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK,LOCAL_SIZE} or PMI_SIZE / PMI_RANK; NODE_RANK (default: ranks placed
/// by slot); MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default derived from the job id).
class MpiEnvironment : public ClusterEnvironment {
 public:
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "mpi"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override;
  int64_t main_port() const override;
  int64_t world_size() const override;
  int64_t global_rank() const override;
  std::string rank_variables() const override;
  int64_t local_rank() const override;
  int64_t node_rank() const override;
  int64_t local_world_size() const override;
  std::optional<std::string> parent_launcher() const override { return "mpirun or its daemon on this node"; }
};

}  // namespace arc::cluster
