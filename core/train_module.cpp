// TrainModule: defaults of the optional steps and the calls that reach the Trainer.
#include <arc/core/train_module.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <torch/torch.h>

namespace arc {

void ManualOptimizer::zero_grad() { trainer_->zero_grad(*optimizer_); }

void ManualOptimizer::step() { trainer_->manual_optimizer_step(*optimizer_); }

void TrainModule::validation_step(Batch&, int64_t) {
  ARC_FAIL("validation data was given but ", name(), " does not override validation_step(); override it, or ",
           "pass no validation data (limit_val_batches=0 skips validation)");
}

void TrainModule::test_step(Batch&, int64_t) { ARC_FAIL("Trainer::test needs ", name(), " to override test_step()"); }

torch::Tensor TrainModule::predict_step(Batch&, int64_t) {
  ARC_FAIL("Trainer::predict needs ", name(), " to override predict_step()");
}

void TrainModule::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  trainer().log_from_module(name, value, options);
}

void TrainModule::log(const std::string& name, double value, const LogOptions& options) {
  trainer().log_from_module(name, torch::scalar_tensor(value, torch::kDouble), options);
}

void TrainModule::log_dict(const std::map<std::string, torch::Tensor>& values, const LogOptions& options) {
  for (const auto& [name, value] : values) log(name, value, options);
}

std::vector<ManualOptimizer> TrainModule::optimizers() {
  std::vector<ManualOptimizer> out;
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
