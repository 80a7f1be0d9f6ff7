// Callback: the interface of code that runs at the Trainer's hooks, as Lightning's. The Trainer calls
// it; the callbacks in callbacks/ implement it.
#pragma once

#include <arc/data/batch.h>

#include <nlohmann/json.hpp>

#include <torch/types.h>

#include <exception>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace arc {

enum class Stage;
class CheckpointReader;
class CheckpointWriter;
class Trainer;
class TrainModule;

/// Override the hooks you need; every hook defaults to doing nothing.
class Callback {
 public:
  virtual ~Callback() = default;

  /// Identifies the callback's state in checkpoints: every callback names it (the shipped ones use
  /// their class name, with the options that tell two instances apart).
  virtual std::string state_key() const = 0;

  /// When fit, validate, test or predict starts, after the data module's setup and before the
  /// module's, its configure_optimizers and DDP's set-up, as Lightning's: a finetuning callback
  /// freezes parameters here.
  virtual void setup(Trainer&, TrainModule&, Stage) {}
  /// At the end of fit, validate, test or predict, before the module's teardown and the data
  /// module's (a stage that fails calls on_exception instead).
  virtual void teardown(Trainer&, TrainModule&, Stage) {}
  /// When fit starts, once its optimizers are configured (and a checkpoint it resumes from is
  /// restored), before the sanity check.
  virtual void on_fit_start(Trainer&, TrainModule&) {}
  /// When fit ends, after on_train_end: fit's last hook.
  virtual void on_fit_end(Trainer&, TrainModule&) {}
  /// Before and after the sanity check: the num_sanity_val_steps validation batches that fit runs
  /// before training (none when it resumes from a checkpoint), through the validation hooks.
  ///@{
  virtual void on_sanity_check_start(Trainer&, TrainModule&) {}
  virtual void on_sanity_check_end(Trainer&, TrainModule&) {}
  ///@}
  /// When fit's training starts, after the sanity check and before the first epoch (skipped, with
  /// on_train_end, when max_epochs or max_steps leave nothing to train).
  virtual void on_train_start(Trainer&, TrainModule&) {}
  /// When fit's training ends, after the last epoch, before on_fit_end.
  virtual void on_train_end(Trainer&, TrainModule&) {}
  /// When a validation pass starts (validate, fit's validations and its sanity check), with the module
  /// in evaluation mode and gradients off, before on_validation_epoch_start.
  virtual void on_validation_start(Trainer&, TrainModule&) {}
  /// When a validation pass ends, after on_validation_epoch_end and the logging of the epoch's metrics.
  virtual void on_validation_end(Trainer&, TrainModule&) {}
  /// When test starts, with the module in evaluation mode and gradients off, before on_test_epoch_start.
  virtual void on_test_start(Trainer&, TrainModule&) {}
  /// When test ends, after on_test_epoch_end and the logging of the epoch's metrics.
  virtual void on_test_end(Trainer&, TrainModule&) {}
  /// When predict starts, with the module in evaluation mode and gradients off, before the first batch.
  virtual void on_predict_start(Trainer&, TrainModule&) {}
  /// When predict ends, after on_predict_epoch_end.
  virtual void on_predict_end(Trainer&, TrainModule&) {}
  /// At each training epoch's start, before its first batch.
  virtual void on_train_epoch_start(Trainer&, TrainModule&) {}
  /// At each training epoch's end, after its last batch and the validation that follows it, with the
  /// epoch's metrics computed (values logged here are added after it), before the epoch-interval
  /// schedulers step.
  virtual void on_train_epoch_end(Trainer&, TrainModule&) {}
  /// After on_validation_start, before the pass's first batch.
  virtual void on_validation_epoch_start(Trainer&, TrainModule&) {}
  /// After the validation pass's last batch, before its epoch metrics are computed (values logged here
  /// count in them).
  virtual void on_validation_epoch_end(Trainer&, TrainModule&) {}
  /// After on_test_start, before test's first batch.
  virtual void on_test_epoch_start(Trainer&, TrainModule&) {}
  /// After test's last batch, before its epoch metrics are computed (values logged here count in them).
  virtual void on_test_epoch_end(Trainer&, TrainModule&) {}
  /// After on_predict_start, before predict's first batch.
  virtual void on_predict_epoch_start(Trainer&, TrainModule&) {}
  /// After predict's last batch, before on_predict_end.
  virtual void on_predict_epoch_end(Trainer&, TrainModule&) {}
  /// Before each training batch's training_step, with the batch on the device.
  virtual void on_train_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  /// After a training batch's optimizer step (or after its backward on an accumulation micro-step,
  /// after its training_step under manual optimization), before a validation due after it. `loss`
  /// is what training_step returned (undefined when it returned nothing).
  virtual void on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) {}
  /// Before and after each validation batch's validation_step, with the batch on the device.
  ///@{
  virtual void on_validation_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  virtual void on_validation_batch_end(Trainer&, TrainModule&, Batch&, int64_t) {}
  ///@}
  /// Before and after each test batch's test_step, with the batch on the device.
  ///@{
  virtual void on_test_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  virtual void on_test_batch_end(Trainer&, TrainModule&, Batch&, int64_t) {}
  ///@}
  /// Before each predict batch's predict_step, with the batch on the device.
  virtual void on_predict_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  /// After each batch's predict_step. `outputs` is what predict_step returned;
  /// Trainer::batch_indices() names the batch's samples.
  virtual void on_predict_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) {}
  /// Before each backward (automatic optimization's, or manual_backward's), with the loss it runs
  /// from (divided by accumulate_grad_batches when gradients accumulate).
  virtual void on_before_backward(Trainer&, TrainModule&, const torch::Tensor&) {}
  /// After each backward, with the gradients computed (still scaled under "16-mixed").
  virtual void on_after_backward(Trainer&, TrainModule&) {}
  /// Before each optimizer step, with the gradients unscaled and not yet clipped.
  virtual void on_before_optimizer_step(Trainer&, TrainModule&, torch::optim::Optimizer&) {}
  /// Before the optimizer's gradients are reset: at each accumulation window's first batch, between
  /// its training_step and its backward (automatic optimization), or at TrainerOptimizer::zero_grad.
  virtual void on_before_zero_grad(Trainer&, TrainModule&, torch::optim::Optimizer&) {}
  /// Called when fit, validate, test or predict fails, before the error leaves the Trainer.
  virtual void on_exception(Trainer&, TrainModule&, const std::exception&) {}
  /// The checkpoint this callback wrote in its last on_exception, or "" (an interrupted fit names
  /// it as the file to resume from).
  virtual std::string exception_checkpoint() const { return ""; }
  /// Checkpoint files this callback wrote or will write, for the Trainer to find: `kind` "best" and
  /// "last" answer ckpt_path="best" and "last"; "resume" lists every file fit may continue from by
  /// itself when a launcher restarts the job (strategy elastic). None by default.
  virtual std::vector<std::string> checkpoint_files(const std::string& kind, const Trainer& trainer) const {
    (void)kind;
    (void)trainer;
    return {};
  }

  /// State saved in checkpoints under state_key() (null: nothing to save).
  virtual nlohmann::json state_dict() const { return nullptr; }
  /// When fit resumes from a checkpoint, what state_dict() saved there (before any callback's
  /// on_load_checkpoint).
  virtual void load_state_dict(const nlohmann::json&) {}
  /// While a checkpoint is written, after the module's weights were added: tensors of the
  /// callback's own go in as "callbacks/<state_key()>/...", and it may put other weights in the
  /// module's place (weight averaging saves the averaged ones, as Lightning's does).
  virtual void on_save_checkpoint(Trainer&, TrainModule&, CheckpointWriter&) {}
  /// When fit resumes, after the module's weights and every callback's state_dict loaded, and
  /// before the optimizers' and schedulers' state, as Lightning's: a callback that adds parameter
  /// groups to an optimizer during fit adds them back here, so that their state loads.
  virtual void on_load_checkpoint(Trainer&, TrainModule&, const CheckpointReader&) {}
};

}  // namespace arc
