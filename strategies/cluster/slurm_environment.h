// SlurmEnvironment: processes started by srun inside a SLURM allocation.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>

namespace arc::cluster {

/// SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID; the address is the first host of SLURM_NODELIST and the
/// port comes from SLURM_JOB_ID (MASTER_ADDR / MASTER_PORT override). With auto_requeue, the job saves
/// and requeues itself (`scontrol requeue`) on the requeue signal.
class SlurmEnvironment : public ClusterEnvironment {
 public:
  /// An environment that requeues as `requeue` says.
  explicit SlurmEnvironment(SlurmEnvironmentOptions requeue = {});
  /// Whether this launcher's variables are present.
  static bool detect();
  std::string name() const override { return "slurm"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override;
  int64_t main_port() const override;
  int64_t world_size() const override;
  int64_t global_rank() const override;
  std::string rank_variables() const override { return "SLURM_PROCID and SLURM_NTASKS"; }
  int64_t local_rank() const override;
  int64_t node_rank() const override;
  int64_t local_world_size() const override;
  void validate(int64_t devices, int64_t num_nodes) const override;
  /// SLURM_RESTART_COUNT: how often the job was requeued.
  int64_t restart_count() const override;
  /// The requeue signal inside a SLURM job (SLURM_JOB_ID set) with auto_requeue on.
  std::optional<std::string> requeue_signal() const override;
  /// "SLURM job $SLURM_JOB_ID".
  std::string requeue_job() const override;
  /// `scontrol requeue $SLURM_JOB_ID`, given a minute.
  void requeue() const override;

 private:
  SlurmEnvironmentOptions requeue_;
};

}  // namespace arc::cluster
