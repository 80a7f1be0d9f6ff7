// Strategy: the process topology a Trainer runs in (one device, or several processes that
// synchronise gradients). Hardware is the accelerator's business; "where am I" the cluster's.
#pragma once

#include <arc/accelerators/accelerator_backend.h>
#include <arc/core/registry.h>
#include <arc/core/trainer_options.h>

#include <torch/types.h>

#include <memory>
#include <string>

namespace arc {

class TrainModule;

/// Places the module, runs backward and tells ranks apart.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  /// Picks this process's device from the accelerator and the options.
  virtual void setup(AcceleratorBackend& accelerator, const TrainerOptions& options) = 0;
  virtual torch::Device root_device() const = 0;
  /// Moves the module to the root device (and, for DDP, wires gradient synchronisation).
  virtual void setup_module(TrainModule& module);
  virtual void backward(const torch::Tensor& loss);
  virtual int64_t world_size() const { return 1; }
  virtual int64_t global_rank() const { return 0; }
  virtual int64_t local_rank() const { return 0; }
  /// Processes sharing this machine's cores (sets the default thread count).
  virtual int64_t local_world_size() const { return 1; }
  bool is_global_zero() const { return global_rank() == 0; }
  virtual void barrier() {}
};

/// Strategies by name: "single_device" (and the distributed ones as they land).
Registry<Strategy>& strategy_registry();

/// The strategy for the `strategy` option; "auto" picks one from the device count.
std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices);

}  // namespace arc
