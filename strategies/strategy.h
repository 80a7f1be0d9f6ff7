// Strategy: the process topology a Trainer runs in (one device, or several processes that
// synchronise gradients). Hardware is the accelerator's business; "where am I" the cluster's.
#pragma once

#include <arc/accelerators/accelerator_backend.h>
#include <arc/base/arg.h>
#include <arc/base/registry.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/collectives.h>

#include <torch/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace arc {

class Profiler;

/// DDP's settings, as Lightning's DDPStrategy(timeout, process_group_backend, ...) and the
/// DistributedDataParallel arguments it passes on take them, with Arclight's own: the collectives'
/// timeout, the first bucket's size and shared memory. Strategies ddp, ddp_spawn and elastic read them.
class DDPStrategyOptions {
  /// Seconds the rendezvous, barriers (checkpoint saves among them) and launchers' waits may take.
  ARC_ARG(double, timeout) = 1800.0;
  /// Seconds one collective of a step (gradient all-reduce, metric sync, vote) may wait for the other
  /// ranks, so that a stuck rank is reported in minutes; never more than `timeout`.
  ARC_ARG(double, collective_timeout) = 300.0;
  /// DDP on GPUs: "auto" (NCCL for CUDA tensors when this build has it, else Gloo), "nccl" (an error
  /// where it cannot run) or "gloo" (Gloo for CUDA tensors too, e.g. for several ranks on one GPU).
  ARC_ARG(std::string, process_group_backend) = "auto";
  /// Tolerate parameters without gradient in a step.
  ARC_ARG(bool, find_unused_parameters) = false;
  /// Every step uses the same parameters (PyTorch DDP's static_graph): parameters that the first
  /// step leaves without gradient are allowed, and later steps all-reduce their buckets while
  /// backward runs instead of at its end.
  ARC_ARG(bool, static_graph) = false;
  /// After a step's all-reduce each gradient is its slot in the gradient bucket (PyTorch DDP's
  /// gradient_as_bucket_view): the average is not copied back, and gradients of different
  /// parameters share one allocation; turn it off to give each its own.
  ARC_ARG(bool, gradient_as_bucket_view) = true;
  /// Gradient bucket sizes in MiB: the first (small, so communication starts early), the rest.
  ///@{
  ARC_ARG(double, first_bucket_mb) = 1.0;
  ARC_ARG(double, bucket_cap_mb) = 25.0;
  ///@}
  /// All-reduce through shared memory among the processes of one machine (Gloo across machines);
  /// off: Gloo everywhere.
  ARC_ARG(bool, shared_memory) = true;
  /// Strategy "fsdp": what each rank keeps of the parameters' training state. "SHARD_GRAD_OP" (the
  /// default, "auto"): each parameter tensor belongs to one rank, which alone keeps its averaged
  /// gradient and optimizer state and steps it (gradients are reduce-scattered);
  /// "SHARD_OPTIMIZER": optimizer state only, gradients all-reduced as DDP's (ZeRO stage 1);
  /// "FULL_SHARD": as SHARD_GRAD_OP, and the parameters of each arc::ShardedUnit have memory only
  /// on their owner outside the unit's forward and backward; "HYBRID_SHARD": FULL_SHARD among the
  /// ranks of each node, every node holding a replica; "NO_SHARD": DDP. The other strategies take
  /// "auto" only.
  ARC_ARG(std::string, sharding_strategy) = "auto";
  /// Strategy "fsdp": how checkpoints hold the model and optimizer state. "full": one file, written
  /// by rank 0 (which gathers what other ranks own); "sharded": a folder in which every rank writes
  /// the parameters and optimizer state it owns, at once, and an index; both load at any world size
  /// (arc::consolidate_checkpoint makes one file of a folder). The other strategies take "full" only.
  ARC_ARG(std::string, state_dict_type) = "full";
  /// Strategy "fsdp" with FULL_SHARD or HYBRID_SHARD: as a unit's forward starts, start gathering
  /// the next unit's parameters (PyTorch FSDP's forward_prefetch), which then arrive while the unit
  /// computes, at the memory of one more unit gathered. Other strategies and shardings take false
  /// only.
  ARC_ARG(bool, forward_prefetch) = false;
  /// Strategy "fsdp" with FULL_SHARD or HYBRID_SHARD: when the gather of the unit before in the
  /// forward starts during backward (PyTorch FSDP's backward_prefetch): "BACKWARD_PRE" (as a unit's
  /// backward starts, the default), "BACKWARD_POST" (once a unit has its gradients and is freed,
  /// less memory) or "NONE" (when that unit's backward reaches it). Gathers start ahead where a
  /// rank's collectives run apart from its training thread (Gloo alone, NCCL, shared memory with a
  /// helper thread; one such rank decides for all); elsewhere they would only hold memory longer.
  /// Other strategies and shardings take "BACKWARD_PRE" only.
  ARC_ARG(std::string, backward_prefetch) = "BACKWARD_PRE";

 public:
  /// `timeout` and `collective_timeout` (at most `timeout`) as durations.
  ///@{
  std::chrono::milliseconds timeout_duration() const;
  std::chrono::milliseconds collective_timeout_duration() const;
  ///@}
  /// Throws arc::Error naming the first impossible value and the remedy.
  void validate() const;
};

/// The launch step's request: what the strategy needs to find or start its processes.
struct LaunchRequest {
  /// Processes per node, as the devices ask (AcceleratorBackend::count).
  int64_t processes = 1;
  /// devices is "auto": under a launcher, as many processes per node as it started.
  bool devices_auto = false;
  /// Machines the job runs on.
  int64_t num_nodes = 1;
  /// "auto" or a registered cluster environment.
  std::string cluster_environment = "auto";
  /// For the SLURM environment: whether and on which signal the job requeues itself.
  cluster::SlurmEnvironmentOptions slurm;
  /// How long starting or joining the launcher's processes may take.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};

  /// Checks that `environment`'s launch matches these devices and nodes.
  void check(const cluster::ClusterEnvironment& environment) const;
};

/// A run as the connector resolved it, once: a strategy sets itself up from this alone.
struct StrategyPlan {
  /// The hardware backend of the devices.
  AcceleratorBackend* accelerator = nullptr;
  /// This node's devices, selected once; a rank takes the one at its local rank.
  std::vector<c10::Device> devices;
  /// Where this process runs (from launch()); null for one process.
  std::shared_ptr<cluster::ClusterEnvironment> environment;
  /// Machines the job runs on.
  int64_t num_nodes = 1;
  /// Intra-op threads of each process on this machine.
  int64_t threads_per_process = 1;
  /// DDP's settings.
  DDPStrategyOptions ddp;
};

/// Places the module, runs backward and tells ranks apart; its collectives serve user code too.
class Strategy {
 public:
  virtual ~Strategy() = default;
  /// The name it is registered under ("single_device", "ddp", ...).
  virtual std::string name() const = 0;
  /// The launch step, before any device is selected: the environment this process runs in. ddp and
  /// elastic find the one their launcher (srun, mpirun, torchrun) made; ddp_spawn starts the other
  /// ranks on this machine; one process needs none (null).
  virtual std::shared_ptr<cluster::ClusterEnvironment> launch(const LaunchRequest& request) = 0;
  /// Takes this process's device and joins the other ranks.
  virtual void setup(const StrategyPlan& plan) = 0;
  /// This process's device, where the module and its batches go.
  virtual torch::Device root_device() const = 0;
  /// Moves the module to the root device (and, for DDP, copies rank 0's weights and wires
  /// gradient synchronisation).
  virtual void setup_module(torch::nn::Module& module);
  /// Runs backward from `loss`; under DDP it also averages the gradients over the ranks, unless
  /// set_gradient_sync turned that off.
  virtual void backward(const torch::Tensor& loss);
  /// Steps `optimizer` through `step` (the precision's step, which says whether it stepped). Sharded
  /// strategies step the parameters this rank owns, then give their new values to every rank.
  virtual bool optimizer_step(torch::optim::Optimizer& optimizer, const std::function<bool()>& step);
  /// torch::nn::utils::clip_grad_norm_ over the gradients of `parameters` (those without one are
  /// left out): their total 2-norm, over every rank's share when sharded, clipped to `max_norm`;
  /// returns the norm before clipping. Every rank calls it with the same parameters.
  virtual double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);
  /// Whether each rank keeps the optimizer state of its own parameters only (strategy fsdp).
  virtual bool sharded() const { return false; }
  /// For each parameter of `optimizer`, in group order, the rank that keeps its state (-1: every
  /// rank); empty when nothing is sharded.
  virtual std::vector<int64_t> state_owners(const torch::optim::Optimizer&) const { return {}; }
  /// The rank that owns `parameter` (one of the module's) under sharding; nullopt unless sharded.
  /// Under HYBRID_SHARD owners are ranks within a node, and the first node's ranks are numbered so.
  virtual std::optional<int64_t> owner_of(const torch::Tensor& /*parameter*/) const { return std::nullopt; }
  /// The owner this process is, as owner_of and state_owners number them: its global rank, or
  /// under HYBRID_SHARD its rank within its node (each node holds what its ranks own, as a replica).
  virtual int64_t owner_rank() const { return global_rank(); }
  /// Whether checkpoints are sharded: each rank writes what it owns (fsdp's state_dict_type "sharded").
  virtual bool sharded_checkpoints() const { return false; }
  /// Whether some parameters have memory only on the rank that owns them, outside the forward and
  /// backward of their arc::ShardedUnit (fsdp's FULL_SHARD).
  virtual bool parameters_sharded() const { return false; }
  /// Runs `configure` (the module's configure_model); there fsdp's FULL_SHARD gives each
  /// arc::ShardedUnit made, from the moment it is made, only the parameters this rank owns, so that
  /// no rank ever holds the whole model (those units stay sharded after the stage; see
  /// docs/sharding.md). Elsewhere just `configure`.
  virtual void build_model(const std::function<void()>& configure) { configure(); }
  /// Runs `fn` with every parameter of the module whole on every rank (a collective: every rank calls
  /// it alike), as saving or loading a checkpoint needs under FULL_SHARD; just `fn` elsewhere.
  virtual void with_whole_parameters(const std::function<void()>& fn) { fn(); }
  /// At an optimizer step, after this rank's backward (`skipped`: it had no loss to run backward
  /// on): whether some rank skipped it, so that every rank skips the step together.
  virtual bool agree_on_skip(bool skipped) { return skipped; }
  /// The number of processes that train together.
  virtual int64_t world_size() const { return 1; }
  /// This process's rank among all, from 0.
  virtual int64_t global_rank() const { return 0; }
  /// This process's rank on its machine, from 0.
  virtual int64_t local_rank() const { return 0; }
  /// Processes sharing this machine's cores (sets the default thread count).
  virtual int64_t local_world_size() const { return 1; }
  /// Whether this is rank 0.
  bool is_global_zero() const { return global_rank() == 0; }
  /// Off during gradient-accumulation micro-steps (no_sync): gradients stay local.
  virtual void set_gradient_sync(bool) {}
  /// The group's collectives, or nullptr for one process.
  virtual Collectives* collectives() { return nullptr; }
  /// Whether a launcher restarts failed processes and fit resumes by itself (strategy elastic).
  virtual bool elastic() const { return false; }
  /// How many times the launcher restarted (torchrun) or requeued (SLURM) the job so far.
  virtual int64_t restart_count() const { return 0; }
  /// Called when this process's stage fails, before the error leaves the Trainer.
  virtual void on_failure(const std::string&) {}
  /// Called on every rank when SIGINT stopped fit, after the callbacks saved, before the process
  /// ends with status 130.
  virtual void on_interrupted() {}
  /// Called when a stage (fit, validate, ...) ends well.
  virtual void teardown() {}
  /// The profiler that times the gradient collectives (null: none).
  ///@{
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }
  Profiler* profiler() const { return profiler_; }
  ///@}

  /// Collectives for user code; with one process they return their input. barrier: waits until every
  /// rank got there.
  void barrier();
  /// Sets `tensor`, in place, to rank `src`'s.
  void broadcast(torch::Tensor& tensor, int64_t src = 0);
  /// `text` as rank `src` has it (any serialisable object goes through this).
  std::string broadcast(const std::string& text, int64_t src = 0);
  /// `tensor` reduced over the ranks with `op`, as a new tensor (the mean by default).
  torch::Tensor all_reduce(const torch::Tensor& tensor, Reduce op = Reduce::mean);
  /// `tensor` reduced in place (as torch.distributed.all_reduce); of a buffer from reduce_buffer,
  /// nothing is copied.
  void all_reduce_(torch::Tensor& tensor, Reduce op = Reduce::mean);
  /// A zeroed tensor for repeated all_reduce_ calls, placed where the group reduces it fastest (under
  /// the shared-memory group, memory that every rank of the node maps). Every rank calls it in the
  /// same order with the same arguments; `options` without a device: the root device.
  torch::Tensor reduce_buffer(torch::IntArrayRef sizes, torch::TensorOptions options = {});
  /// Every value reduced with one collective.
  std::map<std::string, torch::Tensor> all_reduce(const std::map<std::string, torch::Tensor>& values,
                                                  Reduce op = Reduce::mean);
  /// `tensor` as every rank has it, in rank order; the ranks' tensors must have one shape and type
  /// (else every rank fails, naming each rank's).
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);

 private:
  Profiler* profiler_ = nullptr;
};

/// Strategies by name: "single_device", "ddp", "ddp_spawn", "elastic", "fsdp".
Registry<Strategy>& strategy_registry();

/// The strategy for the `strategy` option, for `devices` processes per node; "auto" picks single_device
/// for one process, else ddp under a launcher and ddp_spawn without one (cluster::auto_strategy).
/// "fsdp" is ddp under a launcher and ddp_spawn without one (for one process too), sharded.
std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices, int64_t num_nodes);

}  // namespace arc
