// EvaluationLoop: validation, test and predict passes.
#include <arc/core/evaluation_loop.h>

#include <arc/core/data_loader.h>
#include <arc/core/trainer.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

namespace arc {
namespace {

// Puts the module in eval mode without gradients and restores its mode afterwards.
class EvalScope {
 public:
  explicit EvalScope(TrainModule& module) : module_(module), was_training_(module.is_training()) { module_.eval(); }
  ~EvalScope() { module_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  TrainModule& module_;
  bool was_training_;
  torch::NoGradGuard no_grad_;
};

}  // namespace

EvaluationLoop::EvaluationLoop(Trainer& trainer, TrainModule& module, Stage stage)
    : trainer_(trainer), module_(module), stage_(stage) {}

Metrics EvaluationLoop::run(DataLoader& loader, const BatchAmount& limit) {
  return run_batches(loader, limit.of(loader.num_batches()));
}

void EvaluationLoop::start_hooks() {
  auto& t = trainer_;
  if (stage_ == Stage::test) {
    t.call_callbacks([&](Callback& c) { c.on_test_start(t, module_); });
    module_.on_test_start();
    t.call_callbacks([&](Callback& c) { c.on_test_epoch_start(t, module_); });
    module_.on_test_epoch_start();
  } else {
    t.call_callbacks([&](Callback& c) { c.on_validation_start(t, module_); });
    module_.on_validation_start();
    t.call_callbacks([&](Callback& c) { c.on_validation_epoch_start(t, module_); });
    module_.on_validation_epoch_start();
  }
}

void EvaluationLoop::end_epoch_hooks() {
  auto& t = trainer_;
  if (stage_ == Stage::test) {
    t.call_callbacks([&](Callback& c) { c.on_test_epoch_end(t, module_); });
    module_.on_test_epoch_end();
  } else {
    t.call_callbacks([&](Callback& c) { c.on_validation_epoch_end(t, module_); });
    module_.on_validation_epoch_end();
  }
}

void EvaluationLoop::end_hooks() {
  auto& t = trainer_;
  if (stage_ == Stage::test) {
    t.call_callbacks([&](Callback& c) { c.on_test_end(t, module_); });
    module_.on_test_end();
  } else {
    t.call_callbacks([&](Callback& c) { c.on_validation_end(t, module_); });
    module_.on_validation_end();
  }
}

void EvaluationLoop::step(Batch& batch, int64_t batch_idx) {
  auto& t = trainer_;
  const auto autocast = t.precision_->forward_context();
  if (stage_ == Stage::test) {
    t.call_callbacks([&](Callback& c) { c.on_test_batch_start(t, module_, batch, batch_idx); });
    module_.on_test_batch_start(batch, batch_idx);
    module_.test_step(batch, batch_idx);
    t.call_callbacks([&](Callback& c) { c.on_test_batch_end(t, module_, batch, batch_idx); });
    module_.on_test_batch_end(batch, batch_idx);
  } else {
    t.call_callbacks([&](Callback& c) { c.on_validation_batch_start(t, module_, batch, batch_idx); });
    module_.on_validation_batch_start(batch, batch_idx);
    module_.validation_step(batch, batch_idx);
    t.call_callbacks([&](Callback& c) { c.on_validation_batch_end(t, module_, batch, batch_idx); });
    module_.on_validation_batch_end(batch, batch_idx);
  }
}

Metrics EvaluationLoop::run_batches(DataLoader& loader, int64_t batches) {
  auto& t = trainer_;
  const bool was_training = t.training_;
  t.training_ = false;
  t.num_val_batches_ = batches;
  t.eval_metrics_.clear();
  Metrics epoch_metrics;
  {
    EvalScope scope(module_);
    start_hooks();
    loader.start();
    for (int64_t batch_idx = 0; batch_idx < batches; ++batch_idx) {
      auto fetched = loader.next();
      if (!fetched) break;
      Batch batch = fetched->to(t.device(), t.precision_->input_dtype(), /*non_blocking=*/true);
      t.current_batch_size_ = batch.batch_size();
      step(batch, batch_idx);
    }
    end_epoch_hooks();
    epoch_metrics = t.eval_metrics_.end_epoch(t.metric_gather());
    if (!t.sanity_checking_) t.send_to_loggers(epoch_metrics);
    end_hooks();
  }
  t.training_ = was_training;
  return epoch_metrics;
}

std::vector<torch::Tensor> EvaluationLoop::predict(DataLoader& loader, const BatchAmount& limit) {
  auto& t = trainer_;
  const int64_t batches = limit.of(loader.num_batches());
  std::vector<torch::Tensor> outputs;
  EvalScope scope(module_);
  t.call_callbacks([&](Callback& c) { c.on_predict_start(t, module_); });
  module_.on_predict_start();
  loader.start();
  for (int64_t batch_idx = 0; batch_idx < batches; ++batch_idx) {
    auto fetched = loader.next();
    if (!fetched) break;
    Batch batch = fetched->to(t.device(), t.precision_->input_dtype(), /*non_blocking=*/true);
    t.current_batch_size_ = batch.batch_size();
    {
      const auto autocast = t.precision_->forward_context();
      outputs.push_back(module_.predict_step(batch, batch_idx));
    }
    t.call_callbacks([&](Callback& c) { c.on_predict_batch_end(t, module_, outputs.back(), batch, batch_idx); });
  }
  t.call_callbacks([&](Callback& c) { c.on_predict_end(t, module_); });
  module_.on_predict_end();
  return outputs;
}

}  // namespace arc
