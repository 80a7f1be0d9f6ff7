// LambdaCallback: hooks given as functions, for one-off behaviour without a class.
#pragma once

#include <arc/core/callback.h>

#include <functional>

namespace arc {

/// Every hook of Callback as a function, as Lightning's LambdaCallback takes any hook: `fit_start`
/// runs at on_fit_start, `train_batch_end` at on_train_batch_end, and so on; `on_setup` and
/// `on_teardown` at setup and teardown. Set the functions you need; the others stay empty.
class LambdaCallback : public Callback {
 public:
  /// A function for the hooks that take the Trainer and the module alone.
  using Hook = std::function<void(Trainer&, TrainModule&)>;
  /// A function for setup and teardown, which also take the stage.
  using StageHook = std::function<void(Trainer&, TrainModule&, Stage)>;
  /// The tensor is what the step returned: training_step's loss, predict_step's outputs.
  using BatchHook = std::function<void(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t)>;
  /// A function for the other batch hooks: the batch and its index (the validation and test batch
  /// ends' too).
  using BatchStartHook = std::function<void(Trainer&, TrainModule&, Batch&, int64_t)>;
  /// A function for on_before_backward: the loss.
  using LossHook = std::function<void(Trainer&, TrainModule&, const torch::Tensor&)>;
  /// A function for on_before_optimizer_step and on_before_zero_grad: the optimizer.
  using OptimizerHook = std::function<void(Trainer&, TrainModule&, torch::optim::Optimizer&)>;
  /// A function for on_exception: the error.
  using ExceptionHook = std::function<void(Trainer&, TrainModule&, const std::exception&)>;
  /// A function for on_save_checkpoint: the checkpoint being written.
  using SaveHook = std::function<void(Trainer&, TrainModule&, CheckpointWriter&)>;
  /// A function for on_load_checkpoint: the checkpoint being read.
  using LoadHook = std::function<void(Trainer&, TrainModule&, const CheckpointReader&)>;

  std::string state_key() const override { return "LambdaCallback"; }

  /// The functions, each called at the hook of its name (`train_batch_end` at on_train_batch_end,
  /// `exception` at on_exception) with the hook's arguments; an empty one does nothing.
  ///@{
  StageHook on_setup, on_teardown;
  Hook fit_start, fit_end, sanity_check_start, sanity_check_end, train_start, train_end, validation_start,
      validation_end, test_start, test_end, predict_start, predict_end, train_epoch_start, train_epoch_end,
      validation_epoch_start, validation_epoch_end, test_epoch_start, test_epoch_end, predict_epoch_start,
      predict_epoch_end, after_backward;
  BatchHook train_batch_end, predict_batch_end;
  BatchStartHook train_batch_start, validation_batch_start, validation_batch_end, test_batch_start, test_batch_end,
      predict_batch_start;
  LossHook before_backward;
  OptimizerHook before_optimizer_step, before_zero_grad;
  ExceptionHook exception;
  SaveHook save_checkpoint;
  LoadHook load_checkpoint;
  ///@}

  void setup(Trainer& t, TrainModule& m, Stage s) override { call(on_setup, t, m, s); }
  void teardown(Trainer& t, TrainModule& m, Stage s) override { call(on_teardown, t, m, s); }
  void on_fit_start(Trainer& t, TrainModule& m) override { call(fit_start, t, m); }
  void on_fit_end(Trainer& t, TrainModule& m) override { call(fit_end, t, m); }
  void on_sanity_check_start(Trainer& t, TrainModule& m) override { call(sanity_check_start, t, m); }
  void on_sanity_check_end(Trainer& t, TrainModule& m) override { call(sanity_check_end, t, m); }
  void on_train_start(Trainer& t, TrainModule& m) override { call(train_start, t, m); }
  void on_train_end(Trainer& t, TrainModule& m) override { call(train_end, t, m); }
  void on_validation_start(Trainer& t, TrainModule& m) override { call(validation_start, t, m); }
  void on_validation_end(Trainer& t, TrainModule& m) override { call(validation_end, t, m); }
  void on_test_start(Trainer& t, TrainModule& m) override { call(test_start, t, m); }
  void on_test_end(Trainer& t, TrainModule& m) override { call(test_end, t, m); }
  void on_predict_start(Trainer& t, TrainModule& m) override { call(predict_start, t, m); }
  void on_predict_end(Trainer& t, TrainModule& m) override { call(predict_end, t, m); }
  void on_train_epoch_start(Trainer& t, TrainModule& m) override { call(train_epoch_start, t, m); }
  void on_train_epoch_end(Trainer& t, TrainModule& m) override { call(train_epoch_end, t, m); }
  void on_validation_epoch_start(Trainer& t, TrainModule& m) override { call(validation_epoch_start, t, m); }
  void on_validation_epoch_end(Trainer& t, TrainModule& m) override { call(validation_epoch_end, t, m); }
  void on_test_epoch_start(Trainer& t, TrainModule& m) override { call(test_epoch_start, t, m); }
  void on_test_epoch_end(Trainer& t, TrainModule& m) override { call(test_epoch_end, t, m); }
  void on_predict_epoch_start(Trainer& t, TrainModule& m) override { call(predict_epoch_start, t, m); }
  void on_predict_epoch_end(Trainer& t, TrainModule& m) override { call(predict_epoch_end, t, m); }
  void on_train_batch_start(Trainer& t, TrainModule& m, Batch& b, int64_t i) override {
    call(train_batch_start, t, m, b, i);
  }
  void on_train_batch_end(Trainer& t, TrainModule& m, const torch::Tensor& loss, Batch& b, int64_t i) override {
    call(train_batch_end, t, m, loss, b, i);
  }
  void on_validation_batch_start(Trainer& t, TrainModule& m, Batch& b, int64_t i) override {
    call(validation_batch_start, t, m, b, i);
  }
  void on_validation_batch_end(Trainer& t, TrainModule& m, Batch& b, int64_t i) override {
    call(validation_batch_end, t, m, b, i);
  }
  void on_test_batch_start(Trainer& t, TrainModule& m, Batch& b, int64_t i) override {
    call(test_batch_start, t, m, b, i);
  }
  void on_test_batch_end(Trainer& t, TrainModule& m, Batch& b, int64_t i) override { call(test_batch_end, t, m, b, i); }
  void on_predict_batch_start(Trainer& t, TrainModule& m, Batch& b, int64_t i) override {
    call(predict_batch_start, t, m, b, i);
  }
  void on_predict_batch_end(Trainer& t, TrainModule& m, const torch::Tensor& out, Batch& b, int64_t i) override {
    call(predict_batch_end, t, m, out, b, i);
  }
  void on_before_backward(Trainer& t, TrainModule& m, const torch::Tensor& loss) override {
    call(before_backward, t, m, loss);
  }
  void on_after_backward(Trainer& t, TrainModule& m) override { call(after_backward, t, m); }
  void on_before_optimizer_step(Trainer& t, TrainModule& m, torch::optim::Optimizer& o) override {
    call(before_optimizer_step, t, m, o);
  }
  void on_before_zero_grad(Trainer& t, TrainModule& m, torch::optim::Optimizer& o) override {
    call(before_zero_grad, t, m, o);
  }
  void on_exception(Trainer& t, TrainModule& m, const std::exception& e) override { call(exception, t, m, e); }
  void on_save_checkpoint(Trainer& t, TrainModule& m, CheckpointWriter& w) override { call(save_checkpoint, t, m, w); }
  void on_load_checkpoint(Trainer& t, TrainModule& m, const CheckpointReader& r) override {
    call(load_checkpoint, t, m, r);
  }

 private:
  template <typename Fn, typename... Args>
  static void call(const Fn& hook, Args&&... args) {
    if (hook) hook(std::forward<Args>(args)...);
  }
};

}  // namespace arc
