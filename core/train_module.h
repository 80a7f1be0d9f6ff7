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
#include <utility>
#include <vector>

namespace arc {

class Callback;
class Trainer;

/// When a scheduler steps: after every optimizer step or after every training epoch.
enum class Interval { step, epoch };
/// "step" or "epoch" as an Interval; anything else is an error naming `what` (a config key or an
/// option) and the value.
Interval interval_named(const std::string& text, const std::string& what);

/// A scheduler with Lightning's lr_scheduler_config keys.
struct SchedulerConfig {
  /// The scheduler the Trainer steps.
  std::shared_ptr<LRScheduler> scheduler;
  /// Whether it steps after optimizer steps or after training epochs.
  Interval interval = Interval::epoch;
  /// Steps every `frequency` intervals.
  int64_t frequency = 1;
  /// Metric passed to schedulers that need one (ReduceLROnPlateau), e.g. "val_loss".
  std::string monitor;
};

/// One optimizer and its optional scheduler, as returned by configure_optimizers.
struct OptimizerConfig {
  /// The optimizer.
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  /// Its scheduler, if any.
  std::optional<SchedulerConfig> lr_scheduler;

  /// Implicit, so that configure_optimizers can return {std::make_shared<torch::optim::SGD>(...)}.
  template <typename Opt>
  OptimizerConfig(std::shared_ptr<Opt> opt) : optimizer(std::move(opt)) {}  // NOLINT
  /// An optimizer with its scheduler.
  template <typename Opt>
  OptimizerConfig(std::shared_ptr<Opt> opt, SchedulerConfig scheduler)
      : optimizer(std::move(opt)), lr_scheduler(std::move(scheduler)) {}
};

/// An optimizer as the Trainer steps it, Lightning's LightningOptimizer: what optimizers() gives a
/// manually optimized training_step and what the optimizer_step hook gets.
class TrainerOptimizer {
 public:
  /// `optimizer`, stepped through `trainer`'s hooks and precision.
  TrainerOptimizer(Trainer& trainer, torch::optim::Optimizer& optimizer) : trainer_(&trainer), optimizer_(&optimizer) {}
  /// on_before_zero_grad, then every gradient set to none.
  void zero_grad();
  /// Gradients unscaled (under "16-mixed"), on_before_optimizer_step, configure_gradient_clipping
  /// (automatic optimization), the step, the global step advanced.
  void step();
  /// The LibTorch optimizer itself.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  Trainer* trainer_;
  torch::optim::Optimizer* optimizer_;
};

/// Subclass this: training_step and configure_optimizers are required, the rest optional. Its hooks
/// are Lightning's, each called after the callbacks' hook of the same name; its data hooks
/// (prepare_data, setup, the loaders, teardown) are DataHooks', as a DataModule's.
class TrainModule : public torch::nn::Module, public DataHooks {
 public:
  TrainModule() = default;
  /// A module named `name` (the torch::nn::Module name) instead of after its class.
  explicit TrainModule(const std::string& name) : torch::nn::Module(name) {}

  /// Returns the loss to minimise (automatic optimization) or anything (manual). Under automatic
  /// optimization an undefined tensor skips the batch: no backward, and no optimizer step where it
  /// ends an accumulation window; under DDP every rank skips that step when one rank does.
  virtual torch::Tensor training_step(Batch& batch, int64_t batch_idx) = 0;
  /// Evaluates one validation batch, logging its metrics with log(); required where there is
  /// validation data.
  virtual void validation_step(Batch& batch, int64_t batch_idx);
  /// Evaluates one test batch, logging its metrics with log(); required by Trainer::test.
  virtual void test_step(Batch& batch, int64_t batch_idx);
  /// The outputs of one batch, which Trainer::predict returns; required by Trainer::predict.
  virtual torch::Tensor predict_step(Batch& batch, int64_t batch_idx);
  /// With several loaders in a stage, override these to tell them apart: `dataloader_idx` is the
  /// loader's index (Lightning's third argument). By default they call the two-argument steps.
  ///@{
  virtual void validation_step(Batch& batch, int64_t batch_idx, int64_t /*dataloader_idx*/) {
    validation_step(batch, batch_idx);
  }
  virtual void test_step(Batch& batch, int64_t batch_idx, int64_t /*dataloader_idx*/) { test_step(batch, batch_idx); }
  virtual torch::Tensor predict_step(Batch& batch, int64_t batch_idx, int64_t /*dataloader_idx*/) {
    return predict_step(batch, batch_idx);
  }
  ///@}
  /// The optimizers and their schedulers, asked for when fit starts, after setup: one optimizer
  /// under automatic optimization, any number under manual.
  virtual std::vector<OptimizerConfig> configure_optimizers() = 0;
  /// Builds layers late, as Lightning's configure_model: called in fit, validate, test and predict
  /// after setup and before the precision plugin and the strategy take the module (DDP broadcasts
  /// rank 0's initial weights after it), and by load_from_checkpoint and `module.init_weights`
  /// before they load weights. It runs once per stage, so it must do nothing when the layers exist.
  virtual void configure_model() {}

  /// When fit starts, once configure_optimizers has run (and a checkpoint it resumes from is
  /// restored), before the sanity check.
  virtual void on_fit_start() {}
  /// When fit ends, after on_train_end: fit's last hook.
  virtual void on_fit_end() {}
  /// When fit's training starts, after the sanity check and before the first epoch (skipped, with
  /// on_train_end, when max_epochs or max_steps leave nothing to train).
  virtual void on_train_start() {}
  /// When fit's training ends, after the last epoch, before on_fit_end.
  virtual void on_train_end() {}
  /// When a validation pass starts (validate, fit's validations and its sanity check), in evaluation
  /// mode with gradients off, and when it ends, after its epoch metrics are logged.
  ///@{
  virtual void on_validation_start() {}
  virtual void on_validation_end() {}
  ///@}
  /// When test starts, in evaluation mode with gradients off, and when it ends, after its epoch
  /// metrics are logged.
  ///@{
  virtual void on_test_start() {}
  virtual void on_test_end() {}
  ///@}
  /// When predict starts, in evaluation mode with gradients off, and when it ends, after its last
  /// batch.
  ///@{
  virtual void on_predict_start() {}
  virtual void on_predict_end() {}
  ///@}
  /// Before predict's first batch, after on_predict_start, and after its last, before on_predict_end.
  ///@{
  virtual void on_predict_epoch_start() {}
  virtual void on_predict_epoch_end() {}
  ///@}
  /// Before each predict batch's predict_step, with the batch on the device, and after it, with
  /// what predict_step returned.
  ///@{
  virtual void on_predict_batch_start(Batch& /*batch*/, int64_t /*batch_idx*/) {}
  virtual void on_predict_batch_end(const torch::Tensor& /*outputs*/, Batch& /*batch*/, int64_t /*batch_idx*/) {}
  ///@}
  /// How validation, test and predict put the module in evaluation mode before their start hooks,
  /// and validation and test back in training mode at their end when it was training (fit's
  /// validations): eval() and train(). Override one to keep dropout on, say.
  ///@{
  virtual void on_validation_model_eval() { eval(); }
  virtual void on_validation_model_train() { train(); }
  virtual void on_test_model_eval() { eval(); }
  virtual void on_test_model_train() { train(); }
  virtual void on_predict_model_eval() { eval(); }
  ///@}
  /// At each training epoch's start, before its first batch.
  virtual void on_train_epoch_start() {}
  /// At each training epoch's end, after its last batch and the validation that follows it, with the
  /// epoch's metrics computed (values logged here are added after it), before the epoch-interval
  /// schedulers step.
  virtual void on_train_epoch_end() {}
  /// Before a validation pass's first batch, and after its last, before its epoch metrics are
  /// computed (values logged there count in them).
  ///@{
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  ///@}
  /// Before test's first batch, and after its last, before its epoch metrics are computed (values
  /// logged there count in them).
  ///@{
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  ///@}
  /// Before each training batch's training_step, with the batch on the device.
  virtual void on_train_batch_start(Batch&, int64_t) {}
  /// After a training batch's optimizer step (or after its backward on an accumulation micro-step,
  /// after its training_step under manual optimization), with what training_step returned.
  virtual void on_train_batch_end(const torch::Tensor&, Batch&, int64_t) {}
  /// Before and after each validation batch's validation_step, with the batch on the device.
  ///@{
  virtual void on_validation_batch_start(Batch&, int64_t) {}
  virtual void on_validation_batch_end(Batch&, int64_t) {}
  ///@}
  /// Before and after each test batch's test_step, with the batch on the device.
  ///@{
  virtual void on_test_batch_start(Batch&, int64_t) {}
  virtual void on_test_batch_end(Batch&, int64_t) {}
  ///@}

  /// Before each backward (automatic optimization's, or manual_backward's), with the loss it runs
  /// from (divided by accumulate_grad_batches when gradients accumulate).
  virtual void on_before_backward(const torch::Tensor&) {}
  /// After each backward, with the gradients computed (still scaled under "16-mixed").
  virtual void on_after_backward() {}
  /// Before each optimizer step, with the gradients unscaled and not yet clipped.
  virtual void on_before_optimizer_step(torch::optim::Optimizer&) {}
  /// Before the optimizer's gradients are reset: at each accumulation window's first batch, between
  /// its training_step and its backward (automatic optimization), or at TrainerOptimizer::zero_grad.
  virtual void on_before_zero_grad(torch::optim::Optimizer&) {}

  /// What the automatic loop does, overridable as in Lightning. optimizer_step runs after the
  /// backward of an accumulation window's last batch; not calling optimizer.step() skips the step
  /// (and the step-interval schedulers). Override it to warm up the learning rate, for instance.
  virtual void optimizer_step(int64_t epoch, int64_t batch_idx, TrainerOptimizer& optimizer);
  /// At the start of every accumulation window, after on_before_zero_grad: sets every gradient of
  /// `optimizer` to none.
  virtual void optimizer_zero_grad(int64_t epoch, int64_t batch_idx, torch::optim::Optimizer& optimizer);
  /// Before every automatic optimizer step, with the Trainer's gradient_clip_val and
  /// gradient_clip_algorithm: calls clip_gradients with them.
  virtual void configure_gradient_clipping(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                                           const std::string& gradient_clip_algorithm);
  /// When a scheduler is due (its interval and frequency): steps it, with the monitored value for
  /// ReduceLROnPlateau.
  virtual void lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric);
  /// Clips the gradients of `optimizer`'s parameters, unscaled first under "16-mixed": their total
  /// 2-norm to `gradient_clip_val` ("norm") or each value into [-val, val] ("value"); nothing for
  /// no value or 0. Call it from configure_gradient_clipping or a manually optimized training_step.
  void clip_gradients(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                      const std::string& gradient_clip_algorithm = "norm");
  /// Lightning's freeze(): no parameter requires gradients, and the module is in evaluation mode
  /// (for inference); unfreeze() undoes both. Under DDP the gradient reduction follows which
  /// parameters require gradients at each backward (see BaseFinetuning for freezing parts).
  ///@{
  void freeze();
  void unfreeze();
  ///@}
  /// For several optimizers (manual optimization): only `optimizer`'s parameters require gradients
  /// until untoggle_optimizer puts back what the others had.
  ///@{
  void toggle_optimizer(torch::optim::Optimizer& optimizer);
  void untoggle_optimizer(torch::optim::Optimizer& optimizer);
  ///@}

  /// Callbacks the module brings, added when fit, validate, test or predict starts: each replaces
  /// the Trainer's callbacks of its type (a ModelCheckpoint, or a subclass of one, replaces the
  /// Trainer's ModelCheckpoints), and checkpointing callbacks run last, as in Lightning.
  virtual std::vector<std::shared_ptr<Callback>> configure_callbacks() { return {}; }

  /// How every batch reaches the device, in Lightning's order: on_before_batch_transfer (on the
  /// loader's batch), transfer_batch_to_device (default: every tensor to `device`),
  /// on_after_batch_transfer (on the device). Floating tensors then take a "-true" precision's type.
  /// `dataloader_idx` is the loader's index among the stage's loaders (0 for one).
  ///@{
  virtual void on_before_batch_transfer(Batch&, int64_t /*dataloader_idx*/) {}
  virtual Batch transfer_batch_to_device(const Batch& batch, torch::Device device, int64_t dataloader_idx);
  virtual void on_after_batch_transfer(Batch&, int64_t /*dataloader_idx*/) {}
  ///@}

  /// While a checkpoint is written, before the module's weights are added: add to its metadata.
  virtual void on_save_checkpoint(nlohmann::json&) {}
  /// After a checkpoint's weights loaded into the module (fit resuming, a ckpt_path given to
  /// validate, test or predict, load_from_checkpoint): read what on_save_checkpoint added.
  virtual void on_load_checkpoint(const nlohmann::json&) {}

  /// Records a scalar for the progress bar, loggers and callbacks (step or epoch, see LogOptions).
  ///@{
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options = {});
  void log(const std::string& name, double value, const LogOptions& options = {});
  ///@}
  /// Logs an arc::metrics metric as Lightning logs a torchmetrics object: on_step its value over its
  /// last update (the step's), on_epoch its value over every rank's updates of the epoch, computed
  /// when the epoch ends (every rank's state combined; sync_dist and reduce do not apply), after
  /// which the Trainer resets it. Defaults as for values: per step in training, per epoch in
  /// validation and test. `metric` must outlive the stage (a member of the module).
  void log(const std::string& name, metrics::Metric& metric, const LogOptions& options = {});
  /// log() of each value; where a hook logs them with sync_dist, they are synced in one collective.
  void log_dict(const std::map<std::string, torch::Tensor>& values, const LogOptions& options = {});
  /// Lightning's all_gather: `tensor` from every rank, stacked along a new first dimension in rank
  /// order, [world_size, ...] (also in one process, where Lightning's leaves the dimension out).
  /// Every rank calls it with a tensor of one shape and type. With `sync_grads` the gradient flows
  /// back to each rank's tensor: the sum of every rank's gradient for its slice, as for a loss over
  /// all ranks' outputs (contrastive learning); every rank must then run backward through it.
  torch::Tensor all_gather(const torch::Tensor& tensor, bool sync_grads = false);

  /// Turn off to call optimizers yourself in training_step (GAN-style modules).
  void set_automatic_optimization(bool automatic) { automatic_optimization_ = automatic; }
  /// Whether the Trainer runs backward and the optimizer step itself (true by default).
  bool automatic_optimization() const { return automatic_optimization_; }
  /// The configured optimizers, for manual optimization.
  std::vector<TrainerOptimizer> optimizers();
  /// The configured schedulers, in optimizer order.
  std::vector<std::shared_ptr<LRScheduler>> lr_schedulers();
  /// Backward through the precision (loss scaling) and the strategy (gradient sync), with the backward hooks.
  void manual_backward(const torch::Tensor& loss);

  /// Set by `arc fit` from the config's `optimizer` and `lr_scheduler` sections ({class_path, init_args};
  /// null: not given).
  void set_optimizer_config(nlohmann::json optimizer, nlohmann::json lr_scheduler);
  /// The config's optimizer and lr_scheduler sections (null: not given), as {class_path, init_args}
  /// with every init_arg spelt out, defaults included.
  ///@{
  const nlohmann::json& optimizer_config() const { return optimizer_json_; }
  const nlohmann::json& lr_scheduler_config() const { return scheduler_json_; }
  ///@}
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
  /// The hyper-parameters given to save_hyperparameters (an empty object by default).
  const nlohmann::json& hparams() const { return hparams_; }

  /// The Trainer running this module; an error outside fit/validate/test/predict.
  Trainer& trainer() const;
  /// Whether a Trainer is running the module (inside fit, validate, test or predict).
  bool attached() const { return trainer_ != nullptr; }
  /// The Trainer's current epoch (0 when not attached).
  int64_t current_epoch() const;
  /// The optimizer steps the Trainer has taken (0 when not attached).
  int64_t global_step() const;

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
  bool automatic_optimization_ = true;
  nlohmann::json optimizer_json_;
  nlohmann::json scheduler_json_;
  bool optimizer_config_used_ = false;
  nlohmann::json hparams_ = nlohmann::json::object();
  /// What toggle_optimizer changed: each parameter and whether it required gradients.
  std::vector<std::pair<torch::Tensor, bool>> toggled_;
};

}  // namespace arc
