// FitLoop: training epochs and the optimization step.
#include <arc/core/fit_loop.h>

#include <arc/core/checkpoint_connector.h>
#include <arc/core/console.h>
#include <arc/core/data_loader.h>
#include <arc/core/evaluation_loop.h>
#include <arc/core/signal_connector.h>
#include <arc/core/trainer.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

namespace arc {

FitLoop::FitLoop(Trainer& trainer, TrainModule& module, std::unique_ptr<DataLoader> train,
                 std::unique_ptr<DataLoader> val, std::string resume_from)
    : trainer_(trainer),
      module_(module),
      train_(std::move(train)),
      val_(std::move(val)),
      resume_from_(std::move(resume_from)) {
  const auto& o = trainer_.options();
  max_epochs_ = o.max_epochs().value_or(o.max_steps() == -1 ? 1000 : -1);
  trainer_.num_training_batches_ = o.limit_train_batches().of(train_->num_batches());
  if (val_) val_batches_ = o.limit_val_batches().of(val_->num_batches());
  const int64_t n = trainer_.num_training_batches_;
  const auto& interval = o.val_check_interval();
  if (interval.is_fraction) {
    val_every_ = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * interval.value));
  } else {
    val_every_ = static_cast<int64_t>(interval.value);
    ARC_CHECK(n == 0 || val_every_ <= n, "val_check_interval=", val_every_, " is more than the ", n,
              " training batches of an epoch; lower it or use a fraction such as 0.5");
  }
}

FitLoop::~FitLoop() = default;

bool FitLoop::epochs_done() const { return max_epochs_ != -1 && trainer_.progress_.current_epoch >= max_epochs_; }

bool FitLoop::steps_done() const {
  const auto& o = trainer_.options();
  return (o.max_steps() != -1 && trainer_.progress_.global_step >= o.max_steps()) || agreed_.time_up;
}

// A stop asked for on any rank (request_stop), once the ranks agreed on it: every rank stops at
// the same batch, whatever each one's monitored values said.
bool FitLoop::stop_requested() const {
  if (!agreed_.stop) return false;
  const auto& o = trainer_.options();
  const bool epochs_met = !o.min_epochs() || trainer_.progress_.current_epoch >= *o.min_epochs();
  const bool steps_met = !o.min_steps() || trainer_.progress_.global_step >= *o.min_steps();
  return epochs_met && steps_met;
}

void FitLoop::run() {
  auto& t = trainer_;
  t.configure_optimizers(module_);
  t.progress_ = Progress();
  t.accumulate_grad_batches_ = t.options().accumulate_grad_batches();
  if (!resume_from_.empty()) {
    CheckpointConnector(t).restore_training(module_, resume_from_);
    first_batch_ = t.progress_.epoch_batches;
    console().info("resumed from '{}' at epoch {}, batch {}, global step {}", resume_from_, t.progress_.current_epoch,
                   first_batch_, t.progress_.global_step);
  }
  t.training_ = true;
  module_.train();
  if (t.is_global_zero())
    for (auto& logger : t.loggers_) logger->log_hyperparams(module_.hparams());
  t.call_callbacks([&](Callback& c) { c.on_fit_start(t, module_); });
  module_.on_fit_start();
  if (resume_from_.empty()) sanity_check();
  t.call_callbacks([&](Callback& c) { c.on_train_start(t, module_); });
  module_.on_train_start();
  signals_ = std::make_unique<SignalConnector>(t);
  agreed_ = signals_->settle();
  if (t.num_training_batches_ == 0)
    console().warn("no training batch selected (limit_train_batches or an empty dataset); fit skips training");
  while (t.num_training_batches_ > 0 && !epochs_done() && !steps_done() && !stop_requested()) run_epoch();
  signals_.reset();
  t.call_callbacks([&](Callback& c) { c.on_train_end(t, module_); });
  module_.on_train_end();
  t.call_callbacks([&](Callback& c) { c.on_fit_end(t, module_); });
  module_.on_fit_end();
  t.training_ = false;
  if (!t.stop_reason_.empty()) console().info("fit stopped: {}", t.stop_reason_);
}

void FitLoop::sanity_check() {
  const int64_t wanted = trainer_.options().num_sanity_val_steps();
  if (!val_ || val_batches_ == 0 || wanted == 0) return;
  auto& t = trainer_;
  t.sanity_checking_ = true;
  t.call_callbacks([&](Callback& c) { c.on_sanity_check_start(t, module_); });
  EvaluationLoop(t, module_, Stage::validate)
      .run_batches(*val_, wanted == -1 ? val_batches_ : std::min(wanted, val_batches_));
  t.call_callbacks([&](Callback& c) { c.on_sanity_check_end(t, module_); });
  t.eval_metrics_.clear();
  t.callback_metrics_.clear();
  t.sanity_checking_ = false;
}

void FitLoop::run_epoch() {
  auto& t = trainer_;
  auto& progress = t.progress_;
  train_->set_epoch(progress.current_epoch);
  // A resumed run continues its epoch with the next batch of the same order.
  const int64_t first = std::min(first_batch_, t.num_training_batches_);
  first_batch_ = 0;
  train_->start(first);
  progress.epoch_batches = first;
  t.call_callbacks([&](Callback& c) { c.on_train_epoch_start(t, module_); });
  module_.on_train_epoch_start();
  for (int64_t batch_idx = first; batch_idx < t.num_training_batches_; ++batch_idx) {
    if (steps_done() || stop_requested()) break;
    auto fetched = train_->next();
    if (!fetched) break;
    Batch batch = fetched->to(t.device(), t.precision_->input_dtype(), /*non_blocking=*/true);
    run_batch(batch, batch_idx);
    if (validation_due(batch_idx)) validate();
    agreed_ = signals_->check();
  }
  // Epoch metrics are ready for on_train_epoch_end; values logged there are added after it.
  t.send_to_loggers(t.train_metrics_.end_epoch(t.metric_gather()));
  t.call_callbacks([&](Callback& c) { c.on_train_epoch_end(t, module_); });
  module_.on_train_epoch_end();
  t.send_to_loggers(t.train_metrics_.end_epoch(t.metric_gather()));
  // Under manual optimization the module steps its schedulers itself (lr_schedulers()), as in Lightning.
  if (module_.automatic_optimization()) step_schedulers(Interval::epoch);
  ++progress.current_epoch;
  agreed_ = signals_->settle();
}

void FitLoop::run_batch(Batch& batch, int64_t batch_idx) {
  auto& t = trainer_;
  t.current_batch_size_ = batch.batch_size();
  t.logging_batch_ = (t.progress_.total_batches + 1) % t.options().log_every_n_steps() == 0;
  t.call_callbacks([&](Callback& c) { c.on_train_batch_start(t, module_, batch, batch_idx); });
  module_.on_train_batch_start(batch, batch_idx);
  torch::Tensor loss;
  if (module_.automatic_optimization()) {
    automatic_step(batch, batch_idx, loss);
  } else {
    const auto autocast = t.precision_->forward_context();
    loss = module_.training_step(batch, batch_idx);
  }
  ++t.progress_.epoch_batches;
  ++t.progress_.total_batches;
  t.call_callbacks([&](Callback& c) { c.on_train_batch_end(t, module_, loss, batch, batch_idx); });
  module_.on_train_batch_end(loss, batch, batch_idx);
  if (t.logging_batch_) log_step();
  t.logging_batch_ = false;
}

void FitLoop::automatic_step(Batch& batch, int64_t batch_idx, torch::Tensor& loss) {
  auto& t = trainer_;
  const int64_t accumulate = t.accumulate_grad_batches();
  {
    const auto autocast = t.precision_->forward_context();
    loss = module_.training_step(batch, batch_idx);
  }
  ARC_CHECK(loss.defined() && loss.numel() == 1, "training_step must return the scalar loss to minimise, got ",
            loss.defined() ? "a tensor of shape " + detail::str(loss.sizes()) : std::string("an undefined tensor"),
            "; return a scalar, or call set_automatic_optimization(false) to optimize by hand");
  if (batch_idx % accumulate == 0)
    for (auto& config : t.optimizers_) t.zero_grad(*config.optimizer);
  const bool boundary = (batch_idx + 1) % accumulate == 0 || batch_idx + 1 == t.num_training_batches_;
  t.strategy().set_gradient_sync(boundary);
  t.backward(module_, accumulate > 1 ? loss / static_cast<double>(accumulate) : loss);
  t.strategy().set_gradient_sync(true);
  loss = loss.detach();
  if (boundary) optimizer_step();
}

void FitLoop::optimizer_step() {
  auto& t = trainer_;
  // Hooks and clipping see gradients at their true size.
  for (auto& config : t.optimizers_) t.precision_->unscale(*config.optimizer);
  for (auto& config : t.optimizers_) {
    module_.on_before_optimizer_step(*config.optimizer);
    t.call_callbacks([&](Callback& c) { c.on_before_optimizer_step(t, module_, *config.optimizer); });
  }
  clip_gradients();
  for (auto& config : t.optimizers_) t.precision_->optimizer_step(*config.optimizer);
  t.precision_->update();
  ++t.progress_.global_step;
  step_schedulers(Interval::step);
}

void FitLoop::clip_gradients() {
  const auto& o = trainer_.options();
  if (!o.gradient_clip_val() || *o.gradient_clip_val() == 0) return;
  std::vector<torch::Tensor> parameters;
  for (auto& config : trainer_.optimizers_)
    for (auto& group : config.optimizer->param_groups())
      for (auto& parameter : group.params())
        if (parameter.grad().defined()) parameters.push_back(parameter);
  if (o.gradient_clip_algorithm() == "value") {
    torch::nn::utils::clip_grad_value_(parameters, *o.gradient_clip_val());
  } else {
    torch::nn::utils::clip_grad_norm_(parameters, *o.gradient_clip_val(), 2.0);
  }
}

void FitLoop::step_schedulers(Interval interval) {
  auto& t = trainer_;
  const int64_t count = interval == Interval::step ? t.progress_.global_step : t.progress_.current_epoch + 1;
  for (auto& config : t.optimizers_) {
    if (!config.lr_scheduler || config.lr_scheduler->interval != interval) continue;
    auto& scheduler = *config.lr_scheduler;
    if (count % scheduler.frequency != 0) continue;
    std::optional<double> metric;
    if (!scheduler.monitor.empty()) {
      const auto& metrics = t.callback_metrics();
      const auto found = metrics.find(scheduler.monitor);
      if (found == metrics.end()) {
        std::vector<std::string> names;
        for (const auto& entry : metrics) names.push_back(entry.first);
        ARC_FAIL("the scheduler monitors '", scheduler.monitor,
                 "', which was not logged; available metrics: ", names.empty() ? std::string("none") : join(names),
                 ". Log it with on_epoch=true, or change `monitor`");
      }
      metric = found->second;
    }
    scheduler.scheduler->step(metric);
  }
}

bool FitLoop::validation_due(int64_t batch_idx) const {
  if (!val_ || val_batches_ == 0) return false;
  const auto& o = trainer_.options();
  if ((trainer_.progress_.current_epoch + 1) % o.check_val_every_n_epoch() != 0) return false;
  const bool last = batch_idx + 1 == trainer_.num_training_batches_;
  if (last && o.val_check_interval().is_fraction && o.val_check_interval().value == 1.0) return true;
  return (batch_idx + 1) % val_every_ == 0;
}

void FitLoop::validate() {
  auto& t = trainer_;
  EvaluationLoop(t, module_, Stage::validate).run_batches(*val_, val_batches_);
  ++t.progress_.validation_runs;
}

void FitLoop::log_step() {
  trainer_.send_to_loggers(trainer_.train_metrics_.step_logger_metrics(trainer_.metric_gather()));
}

}  // namespace arc
