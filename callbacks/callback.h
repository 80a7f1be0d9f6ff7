// Callback: the interface of code that runs at the Trainer's hooks, as Lightning's. The Trainer calls
// it, so it needs only base/ and data/; the callbacks beside it implement it on top of core/.
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

  /// Identifies the callback's state in checkpoints; the class name by default.
  virtual std::string state_key() const = 0;

  /// When fit, validate, test or predict starts, after the data module's setup and before the
  /// module's, its configure_optimizers and DDP's set-up, as Lightning's: a finetuning callback
  /// freezes parameters here. teardown: at the stage's end, before the module's teardown.
  virtual void setup(Trainer&, TrainModule&, Stage) {}
  virtual void teardown(Trainer&, TrainModule&, Stage) {}
  virtual void on_fit_start(Trainer&, TrainModule&) {}
  virtual void on_fit_end(Trainer&, TrainModule&) {}
  virtual void on_sanity_check_start(Trainer&, TrainModule&) {}
  virtual void on_sanity_check_end(Trainer&, TrainModule&) {}
  virtual void on_train_start(Trainer&, TrainModule&) {}
  virtual void on_train_end(Trainer&, TrainModule&) {}
  virtual void on_validation_start(Trainer&, TrainModule&) {}
  virtual void on_validation_end(Trainer&, TrainModule&) {}
  virtual void on_test_start(Trainer&, TrainModule&) {}
  virtual void on_test_end(Trainer&, TrainModule&) {}
  virtual void on_predict_start(Trainer&, TrainModule&) {}
  virtual void on_predict_end(Trainer&, TrainModule&) {}
  virtual void on_train_epoch_start(Trainer&, TrainModule&) {}
  virtual void on_train_epoch_end(Trainer&, TrainModule&) {}
  virtual void on_validation_epoch_start(Trainer&, TrainModule&) {}
  virtual void on_validation_epoch_end(Trainer&, TrainModule&) {}
  virtual void on_test_epoch_start(Trainer&, TrainModule&) {}
  virtual void on_test_epoch_end(Trainer&, TrainModule&) {}
  virtual void on_predict_epoch_end(Trainer&, TrainModule&) {}
  virtual void on_train_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  /// `loss` is what training_step returned (undefined when it returned nothing).
  virtual void on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) {}
  virtual void on_validation_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  virtual void on_validation_batch_end(Trainer&, TrainModule&, Batch&, int64_t) {}
  virtual void on_test_batch_start(Trainer&, TrainModule&, Batch&, int64_t) {}
  virtual void on_test_batch_end(Trainer&, TrainModule&, Batch&, int64_t) {}
  /// `outputs` is what predict_step returned; Trainer::batch_indices() names the batch's samples.
  virtual void on_predict_batch_end(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t) {}
  virtual void on_before_backward(Trainer&, TrainModule&, const torch::Tensor&) {}
  virtual void on_after_backward(Trainer&, TrainModule&) {}
  virtual void on_before_optimizer_step(Trainer&, TrainModule&, torch::optim::Optimizer&) {}
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
