// ClusterEnvironment: "where am I" — the master address and port, world size and ranks, as the
// launcher (srun, mpirun, torchrun, LSF, Kubeflow, or Arclight itself) set them.
#pragma once

#include <arc/base/arg.h>
#include <arc/base/registry.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc::cluster {

/// Lightning's SLURMEnvironment(auto_requeue, requeue_signal): on `requeue_signal` a job that its
/// launcher can requeue saves a checkpoint and asks to run again.
class SlurmEnvironmentOptions {
  /// Whether the job requeues itself on `requeue_signal` (off: the signal is not caught).
  ARC_ARG(bool, auto_requeue) = true;
  /// "SIGUSR1", "SIGUSR2", "SIGHUP" or "SIGALRM" (requeue_signal_names).
  ARC_ARG(std::string, requeue_signal) = "SIGUSR1";
};

/// The signals a requeue may be asked by.
std::vector<std::string> requeue_signal_names();
/// The number of one of those signals; an error naming the allowed ones for any other name.
int requeue_signal_number(const std::string& name);

/// Reads a launcher's environment. Missing, partial or non-numeric variables are errors that name them.
class ClusterEnvironment {
 public:
  virtual ~ClusterEnvironment() = default;
  /// The name it is registered under ("slurm", "torchelastic", ...).
  virtual std::string name() const = 0;
  /// Whether a launcher started the processes (so Arclight must not start any).
  virtual bool creates_processes_externally() const = 0;
  /// Where no launcher started them: what is missing, and the fix, for an error.
  virtual std::string no_launcher_reason() const;
  /// The address and port of rank 0's rendezvous store.
  ///@{
  virtual std::string main_address() const = 0;
  virtual int64_t main_port() const = 0;
  ///@}
  /// The processes of the job, over every node.
  virtual int64_t world_size() const = 0;
  /// This process's rank among them, from 0.
  virtual int64_t global_rank() const = 0;
  /// The variables that global_rank() and world_size() read ("RANK and WORLD_SIZE"), for errors.
  virtual std::string rank_variables() const = 0;
  /// This process's rank among those of its node, from 0.
  virtual int64_t local_rank() const = 0;
  /// This node's index among the job's nodes, from 0.
  virtual int64_t node_rank() const = 0;
  /// Processes on this node; world_size / num_nodes unless the launcher says.
  virtual int64_t local_world_size() const;
  /// Whether the launcher already hosts the rendezvous store at the main address and port (torchrun's
  /// agent does), so that rank 0 joins it instead of opening one.
  virtual bool launcher_hosts_store() const { return false; }
  /// The launcher this process must end with, where that is its parent and starts each rank in a
  /// session or process group of its own, so that killing it leaves the ranks running (torchrun's
  /// agent under PyTorch 2.x, mpirun); nullopt elsewhere (srun's ranks are its step daemon's children).
  virtual std::optional<std::string> parent_launcher() const { return std::nullopt; }
  /// How many times the launcher restarted this job's processes (torchrun --max_restarts, SLURM requeue).
  virtual int64_t restart_count() const { return 0; }
  /// Checks the launch against the Trainer's devices and num_nodes.
  virtual void validate(int64_t devices, int64_t num_nodes) const;
  /// The signal's name on which this job saves and asks its launcher to requeue it, or nullopt where
  /// the launcher cannot requeue (or requeue is off).
  virtual std::optional<std::string> requeue_signal() const { return std::nullopt; }
  /// The job that requeue() puts back in its launcher's queue ("SLURM job 42"); an error that says so
  /// where the launcher cannot requeue.
  virtual std::string requeue_job() const;
  /// Puts requeue_job() back in its launcher's queue; an error that says what failed.
  virtual void requeue() const;
};

/// Environments by name: local, slurm, torchelastic, mpi, lsf, kubeflow; SLURM's takes the requeue options.
Registry<ClusterEnvironment, const SlurmEnvironmentOptions&>& cluster_registry();

/// The first environment whose variables are present, in the order TorchElastic > SLURM > LSF >
/// MPI > Kubeflow > Local.
std::shared_ptr<ClusterEnvironment> detect(const SlurmEnvironmentOptions& requeue = {});

/// The strategy that strategy "auto" stands for, as Lightning chooses it, for `devices` processes
/// per node on `num_nodes` nodes: "single_device" for one process; for more, "ddp" when a launcher
/// (srun, mpirun, torchrun, ...) started this process and "ddp_spawn" otherwise. A rank that
/// Arclight's own launcher started stays "ddp_spawn", as its parent chose.
std::string auto_strategy(int64_t devices, int64_t num_nodes);

/// A `strategy` option as Lightning's registry spells it: the strategy's own name, and the
/// find_unused_parameters that a name such as "ddp_find_unused_parameters_true" (or
/// "ddp_spawn_find_unused_parameters_false") gives; none for a plain name.
struct StrategyName {
  /// The strategy's registered name ("ddp").
  std::string name;
  /// What the name says of find_unused_parameters, if anything.
  std::optional<bool> find_unused_parameters;
};
StrategyName parse_strategy_name(const std::string& text);

/// The environment variable `name`, or nullopt when unset or empty.
std::optional<std::string> env(const std::string& name);
/// `name` parsed as an integer; an error naming the variable when unset or not a number.
int64_t env_int(const std::string& name);
/// `name` as an integer, or `fallback` when unset; an error when set but not a number.
int64_t env_int_or(const std::string& name, int64_t fallback);
/// MASTER_PORT when set, checked to be a TCP port (1..65535); nullopt when unset.
std::optional<int64_t> master_port();
/// MASTER_PORT, which `launcher` should have set; an error naming it when unset or not a port.
int64_t required_master_port(const std::string& launcher);
/// The first host of a SLURM/LSF host list: "node[01-04,7]" → "node01", "a,b" → "a".
std::string first_host(const std::string& nodelist);

}  // namespace arc::cluster
