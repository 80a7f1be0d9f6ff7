// TrainModule: what users subclass, as Lightning's LightningModule. It is a torch::nn::Module,
// so register_module, parameters(), to() and train()/eval() work as LibTorch users expect.
#pragma once

#include <arc/core/lr_scheduler.h>
#include <arc/core/metric_store.h>
#include <arc/data/batch.h>
#include <arc/data/data_module.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class Trainer;

/// When a scheduler steps: after every optimizer step or after every training epoch.
enum class Interval { step, epoch };

/// A scheduler with Lightning's lr_scheduler_config keys.
struct SchedulerConfig {
  std::shared_ptr<LRScheduler> scheduler;
  Interval interval = Interval::epoch;
  /// Steps every `frequency` intervals.
  int64_t frequency = 1;
  /// Metric passed to schedulers that need one (ReduceLROnPlateau), e.g. "val_loss".
  std::string monitor;
};

/// One optimizer and its optional scheduler, as returned by configure_optimizers.
struct OptimizerConfig {
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::optional<SchedulerConfig> lr_scheduler;

  /// Implicit, so that configure_optimizers can return {std::make_shared<torch::optim::SGD>(...)}.
  template <typename Opt>
  OptimizerConfig(std::shared_ptr<Opt> opt) : optimizer(std::move(opt)) {}  // NOLINT
  template <typename Opt>
  OptimizerConfig(std::shared_ptr<Opt> opt, SchedulerConfig scheduler)
      : optimizer(std::move(opt)), lr_scheduler(std::move(scheduler)) {}
};

/// An optimizer seen from a manually optimized training_step: step() runs the hooks and counts
/// the global step, as Lightning's LightningOptimizer.
class ManualOptimizer {
 public:
  ManualOptimizer(Trainer& trainer, torch::optim::Optimizer& optimizer) : trainer_(&trainer), optimizer_(&optimizer) {}
  void zero_grad();
  void step();
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  Trainer* trainer_;
  torch::optim::Optimizer* optimizer_;
};

/// Subclass this: training_step and configure_optimizers are required, the rest optional.
class TrainModule : public torch::nn::Module {
 public:
  TrainModule() = default;
  explicit TrainModule(const std::string& name) : torch::nn::Module(name) {}

  /// Returns the loss to minimise (automatic optimization) or anything (manual).
  virtual torch::Tensor training_step(Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(Batch& batch, int64_t batch_idx);
  virtual void test_step(Batch& batch, int64_t batch_idx);
  virtual torch::Tensor predict_step(Batch& batch, int64_t batch_idx);
  virtual std::vector<OptimizerConfig> configure_optimizers() = 0;

  /// Data the module owns itself; a DataModule or sources passed to fit take precedence.
  virtual DataSource train_dataloader() { return {}; }
  virtual DataSource val_dataloader() { return {}; }
  virtual DataSource test_dataloader() { return {}; }
  virtual DataSource predict_dataloader() { return {}; }

  /// Lifecycle hooks, as Lightning names them.
  virtual void setup(Stage) {}
  virtual void teardown(Stage) {}
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_start() {}
  virtual void on_train_end() {}
  virtual void on_validation_start() {}
  virtual void on_validation_end() {}
  virtual void on_test_start() {}
  virtual void on_test_end() {}
  virtual void on_predict_start() {}
  virtual void on_predict_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_train_batch_start(Batch&, int64_t) {}
  virtual void on_train_batch_end(const torch::Tensor&, Batch&, int64_t) {}
  virtual void on_validation_batch_start(Batch&, int64_t) {}
  virtual void on_validation_batch_end(Batch&, int64_t) {}
  virtual void on_test_batch_start(Batch&, int64_t) {}
  virtual void on_test_batch_end(Batch&, int64_t) {}

  /// Optimization hooks.
  virtual void on_before_backward(const torch::Tensor&) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(torch::optim::Optimizer&) {}
  virtual void on_before_zero_grad(torch::optim::Optimizer&) {}

  /// Checkpoint hooks: add to or read from the checkpoint's metadata.
  virtual void on_save_checkpoint(nlohmann::json&) {}
  virtual void on_load_checkpoint(const nlohmann::json&) {}

  /// Records a scalar for the progress bar, loggers and callbacks (step or epoch, see LogOptions).
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options = {});
  void log(const std::string& name, double value, const LogOptions& options = {});
  void log_dict(const std::map<std::string, torch::Tensor>& values, const LogOptions& options = {});

  /// Turn off to call optimizers yourself in training_step (GAN-style modules).
  void set_automatic_optimization(bool automatic) { automatic_optimization_ = automatic; }
  bool automatic_optimization() const { return automatic_optimization_; }
  /// The configured optimizers, for manual optimization.
  std::vector<ManualOptimizer> optimizers();
  /// The configured schedulers, in optimizer order.
  std::vector<std::shared_ptr<LRScheduler>> lr_schedulers();
  /// Backward through the precision (loss scaling) and the strategy (gradient sync), with the backward hooks.
  void manual_backward(const torch::Tensor& loss);

  /// Set by `arc fit` from the config's `optimizer` and `lr_scheduler` sections ({class_path, init_args};
  /// null: not given).
  void set_optimizer_config(nlohmann::json optimizer, nlohmann::json lr_scheduler);
  /// For configure_optimizers: the optimizer over `parameters` (with its scheduler) that the config
  /// names, or `fallback()` when it names none (a config's lr_scheduler then schedules that one), as
  /// LightningCLI lets a config choose. Modules that call it opt in to config-chosen optimizers.
  OptimizerConfig configured_optimizer(std::vector<torch::Tensor> parameters,
                                       const std::function<OptimizerConfig()>& fallback);
  /// Whether the config named an optimizer or scheduler that configure_optimizers did not take.
  bool optimizer_config_unused() const {
    return !optimizer_config_used_ && !(optimizer_json_.is_null() && scheduler_json_.is_null());
  }

  /// Hyper-parameters recorded by loggers and checkpoints.
  void save_hyperparameters(nlohmann::json hparams) { hparams_ = std::move(hparams); }
  const nlohmann::json& hparams() const { return hparams_; }

  /// The Trainer running this module; an error outside fit/validate/test/predict.
  Trainer& trainer() const;
  bool attached() const { return trainer_ != nullptr; }
  int64_t current_epoch() const;
  int64_t global_step() const;

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
  bool automatic_optimization_ = true;
  nlohmann::json optimizer_json_;
  nlohmann::json scheduler_json_;
  bool optimizer_config_used_ = false;
  nlohmann::json hparams_ = nlohmann::json::object();
};

}  // namespace arc
