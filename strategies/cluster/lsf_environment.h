// LsfEnvironment: processes started by jsrun in an IBM LSF job.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// LSB_JOBID, LSB_DJOB_RANKFILE (hosts, the launch node first), JSM_NAMESPACE_SIZE, JSM_NAMESPACE_RANK,
/// JSM_NAMESPACE_LOCAL_RANK.
class LsfEnvironment : public ClusterEnvironment {
 public:
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "lsf"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override;
  int64_t main_port() const override;
  int64_t world_size() const override;
  int64_t global_rank() const override;
  std::string rank_variables() const override { return "JSM_NAMESPACE_RANK and JSM_NAMESPACE_SIZE"; }
  int64_t local_rank() const override;
  int64_t node_rank() const override;
  int64_t local_world_size() const override;
};

}  // namespace arc::cluster
