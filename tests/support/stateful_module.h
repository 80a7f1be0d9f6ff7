// A module whose every piece of training state matters for exact resume, and the options and data
// the checkpoint tests resume it with.
#pragma once

#include "support/tiny_module.h"

namespace arc::testing {

// SGD with momentum and a per-step scheduler: every piece of state matters for exact resume.
class Stateful : public TinyModule {
 public:
  Stateful() {
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.fill_(0.05);
  }
  torch::Tensor training_step(Batch& batch, int64_t index) override {
    auto loss = TinyModule::training_step(batch, index);
    log("epoch_loss", loss, LogOptions().on_step(false).on_epoch(true));
    log("worst_loss", loss, LogOptions().on_epoch(true).reduce(Reduce::max));
    return loss;
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 3, 0.7), Interval::step, 1, ""})};
  }
};

inline TrainerOptions resume_options() {
  return quiet().max_epochs(3).accumulate_grad_batches(2).seed(3).val_check_interval(BatchAmount::fraction(0.5));
}

inline DataSource shuffled() {
  auto data = tiny_data(14, 2);  // 7 batches: accumulation windows cross the epoch end
  data.options.shuffle(true);
  return data;
}

}  // namespace arc::testing
