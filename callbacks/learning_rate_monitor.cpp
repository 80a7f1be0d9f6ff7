// LearningRateMonitor.
#include <arc/callbacks/learning_rate_monitor.h>

#include <arc/core/error.h>
#include <arc/core/trainer.h>

#include <torch/optim/optimizer.h>

namespace arc {

LearningRateMonitor::LearningRateMonitor(std::string logging_interval) : interval_(std::move(logging_interval)) {
  ARC_CHECK(interval_ == "step" || interval_ == "epoch", "LearningRateMonitor logging_interval must be \"step\" or ",
            "\"epoch\", got \"", interval_, "\"");
}

std::map<std::string, double> LearningRateMonitor::rates(const Trainer& trainer) {
  std::map<std::string, double> out;
  const auto& configs = trainer.optimizer_configs();
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string name = "lr-optimizer" + (configs.size() > 1 ? "-" + std::to_string(i) : std::string());
    const auto& groups = configs[i].optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      out[groups.size() > 1 ? name + "/pg" + std::to_string(g) : name] = groups[g].options().get_lr();
  }
  return out;
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  if (interval_ == "epoch") trainer.log_to_loggers(rates(trainer));
}

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  if (interval_ == "step" && trainer.logging_batch()) trainer.log_to_loggers(rates(trainer));
}

}  // namespace arc
