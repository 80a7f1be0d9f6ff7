// TrainModule: defaults of the optional steps and the calls that reach the Trainer.
#include <arc/core/train_module.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

namespace arc {
namespace {

// The strategy, kept in an autograd context for the backward of a gather.
struct StrategyRef : torch::CustomClassHolder {
  explicit StrategyRef(Strategy& used) : strategy(used) {}
  Strategy& strategy;
};

// all_gather whose backward sums every rank's gradient for this rank's slice (torch.distributed.nn's
// all_gather, which Lightning's sync_grads uses).
class GatherWithGradients : public torch::autograd::Function<GatherWithGradients> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& tensor, Strategy* strategy) {
    ctx->saved_data["strategy"] = c10::IValue::make_capsule(c10::make_intrusive<StrategyRef>(*strategy));
    return torch::stack(strategy->all_gather(tensor));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradients) {
    auto& strategy = c10::static_intrusive_pointer_cast<StrategyRef>(ctx->saved_data["strategy"].toCapsule())->strategy;
    return {strategy.all_reduce(gradients[0], Reduce::sum)[strategy.global_rank()], torch::Tensor()};
  }
};

}  // namespace

Interval interval_named(const std::string& text, const std::string& what) {
  ARC_CHECK(text == "step" || text == "epoch", what, " must be \"step\" or \"epoch\", got \"", text, "\"");
  return text == "step" ? Interval::step : Interval::epoch;
}

void TrainerOptimizer::zero_grad() { trainer_->zero_grad(*optimizer_); }

void TrainerOptimizer::step() { trainer_->optimizer_step(*optimizer_); }

void TrainModule::validation_step(Batch&, int64_t) {
  ARC_FAIL("validation data was given but ", name(), " does not override validation_step(); override it, or ",
           "pass no validation data (limit_val_batches=0 skips validation)");
}

void TrainModule::test_step(Batch&, int64_t) { ARC_FAIL("Trainer::test needs ", name(), " to override test_step()"); }

torch::Tensor TrainModule::predict_step(Batch&, int64_t) {
  ARC_FAIL("Trainer::predict needs ", name(), " to override predict_step()");
}

void TrainModule::optimizer_step(int64_t, int64_t, TrainerOptimizer& optimizer) { optimizer.step(); }

void TrainModule::optimizer_zero_grad(int64_t, int64_t, torch::optim::Optimizer& optimizer) {
  // set_to_none: the next backward writes gradients instead of adding to zeros.
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params())
      if (parameter.grad().defined()) parameter.mutable_grad() = torch::Tensor();
}

void TrainModule::configure_gradient_clipping(torch::optim::Optimizer& optimizer,
                                              std::optional<double> gradient_clip_val,
                                              const std::string& gradient_clip_algorithm) {
  clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm);
}

void TrainModule::lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric) { scheduler.step(metric); }

void TrainModule::clip_gradients(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                                 const std::string& gradient_clip_algorithm) {
  // Hooks and clipping see gradients at their true size: the precision unscales them first.
  trainer().precision().clip_gradients(optimizer, gradient_clip_val.value_or(0), gradient_clip_algorithm);
}

void TrainModule::freeze() {
  for (auto& parameter : parameters()) parameter.set_requires_grad(false);
  eval();
}

void TrainModule::unfreeze() {
  for (auto& parameter : parameters()) parameter.set_requires_grad(true);
  train();
}

void TrainModule::toggle_optimizer(torch::optim::Optimizer& optimizer) {
  ARC_CHECK(toggled_.empty(), "toggle_optimizer: an optimizer is toggled already; call untoggle_optimizer(...) ",
            "for it first");
  for (const auto& config : trainer().optimizer_configs())
    for (auto& group : config.optimizer->param_groups())
      for (auto& parameter : group.params()) {
        toggled_.emplace_back(parameter, parameter.requires_grad());
        parameter.set_requires_grad(false);
      }
  // The toggled optimizer's parameters get back what they had.
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params())
      for (const auto& [toggled, required] : toggled_)
        if (toggled.is_same(parameter)) parameter.set_requires_grad(required);
}

void TrainModule::untoggle_optimizer(torch::optim::Optimizer&) {
  for (auto& [parameter, required] : toggled_) parameter.set_requires_grad(required);
  toggled_.clear();
}

Batch TrainModule::transfer_batch_to_device(const Batch& batch, torch::Device device, int64_t) {
  return batch.to(device, std::nullopt, /*non_blocking=*/true);
}

void TrainModule::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  trainer().log_from_module(name, value, options);
}

void TrainModule::log(const std::string& name, double value, const LogOptions& options) {
  trainer().log_from_module(name, torch::scalar_tensor(value, torch::kDouble), options);
}

void TrainModule::log(const std::string& name, metrics::Metric& metric, const LogOptions& options) {
  trainer().log_from_module(name, metric, options);
}

void TrainModule::log_dict(const std::map<std::string, torch::Tensor>& values, const LogOptions& options) {
  trainer().log_from_module(values, options);
}

torch::Tensor TrainModule::all_gather(const torch::Tensor& tensor, bool sync_grads) {
  auto& strategy = trainer().strategy();
  if (sync_grads) return GatherWithGradients::apply(tensor, &strategy);
  return torch::stack(strategy.all_gather(tensor));
}

std::vector<TrainerOptimizer> TrainModule::optimizers() {
  std::vector<TrainerOptimizer> out;
  for (const auto& config : trainer().optimizer_configs()) out.emplace_back(*trainer_, *config.optimizer);
  return out;
}

std::vector<std::shared_ptr<LRScheduler>> TrainModule::lr_schedulers() {
  std::vector<std::shared_ptr<LRScheduler>> out;
  for (const auto& config : trainer().optimizer_configs())
    if (config.lr_scheduler) out.push_back(config.lr_scheduler->scheduler);
  return out;
}

void TrainModule::manual_backward(const torch::Tensor& loss) { trainer().backward(*this, loss); }

Trainer& TrainModule::trainer() const {
  ARC_CHECK(trainer_ != nullptr, name(), " is not attached to a Trainer; log() and optimizers() work only inside ",
            "fit, validate, test or predict");
  return *trainer_;
}

int64_t TrainModule::current_epoch() const { return trainer_ == nullptr ? 0 : trainer_->current_epoch(); }

int64_t TrainModule::global_step() const { return trainer_ == nullptr ? 0 : trainer_->global_step(); }

}  // namespace arc
