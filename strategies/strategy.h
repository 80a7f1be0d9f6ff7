// Strategy: the process topology a Trainer runs in (one device, or several processes that
// synchronise gradients). Hardware is the accelerator's business; "where am I" the cluster's.
#pragma once

#include <arc/accelerators/accelerator_backend.h>
#include <arc/core/registry.h>
#include <arc/core/trainer_options.h>
#include <arc/strategies/collectives.h>

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace arc {

/// Places the module, runs backward and tells ranks apart.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  /// Picks this process's device from the accelerator and the options.
  virtual void setup(AcceleratorBackend& accelerator, const TrainerOptions& options) = 0;
  virtual torch::Device root_device() const = 0;
  /// Moves the module to the root device (and, for DDP, copies rank 0's weights and wires
  /// gradient synchronisation).
  virtual void setup_module(torch::nn::Module& module);
  virtual void backward(const torch::Tensor& loss);
  virtual int64_t world_size() const { return 1; }
  virtual int64_t global_rank() const { return 0; }
  virtual int64_t local_rank() const { return 0; }
  /// Processes sharing this machine's cores (sets the default thread count).
  virtual int64_t local_world_size() const { return 1; }
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

  /// Collectives for user code; with one process they return their input.
  void barrier();
  void broadcast(torch::Tensor& tensor, int64_t src = 0);
  /// `text` as rank `src` has it (any serialisable object goes through this).
  std::string broadcast(const std::string& text, int64_t src = 0);
  torch::Tensor all_reduce(const torch::Tensor& tensor, Reduce op = Reduce::mean);
  /// Every value reduced with one collective.
  std::map<std::string, torch::Tensor> all_reduce(const std::map<std::string, torch::Tensor>& values,
                                                  Reduce op = Reduce::mean);
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
};

/// Strategies by name: "single_device", "ddp", "ddp_spawn", "elastic".
Registry<Strategy>& strategy_registry();

/// The strategy for the `strategy` option, with `devices` selected per node; "auto" picks single_device
/// for one process, else ddp under a launcher and ddp_spawn without one (cluster::auto_strategy).
std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices, int64_t num_nodes);

}  // namespace arc
