// LearningRateMonitor.
#include <arc/callbacks/learning_rate_monitor.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cxxabi.h>
#include <cstdlib>
#include <functional>
#include <memory>
#include <typeinfo>

namespace arc {
namespace {

// "SGD" for a torch::optim::SGD, and the unqualified class name of any other optimizer.
std::string class_name(const torch::optim::Optimizer& optimizer) {
  const char* mangled = typeid(optimizer).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  const std::string name = status == 0 ? demangled.get() : mangled;
  const auto colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

// Lightning's momentum: the group's momentum, or beta1 where the optimizer has betas; 0 without.
double momentum_of(const torch::optim::OptimizerOptions& options) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options)) return sgd->momentum();
  if (const auto* rms = dynamic_cast<const torch::optim::RMSpropOptions*>(&options)) return rms->momentum();
  if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) return std::get<0>(adam->betas());
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) return std::get<0>(adamw->betas());
  return 0.0;
}

double weight_decay_of(const torch::optim::OptimizerOptions& options) {
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options)) return sgd->weight_decay();
  if (const auto* rms = dynamic_cast<const torch::optim::RMSpropOptions*>(&options)) return rms->weight_decay();
  if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) return adam->weight_decay();
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) return adamw->weight_decay();
  if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradOptions*>(&options)) return adagrad->weight_decay();
  return 0.0;
}

// Every parameter group's rate, and "<name>-momentum" and "<name>-weight_decay" where asked for,
// with Lightning's names: "lr-<class>", "-<k>" for the k-th further optimizer of that class, and
// "/pg<j>" (from 1) when an optimizer has several parameter groups.
// Only the optimizers that `include` accepts are logged; the names count every optimizer.
std::map<std::string, double> collect(const Trainer& trainer, bool momentum, bool weight_decay,
                                      const std::function<bool(const OptimizerConfig&)>& include) {
  std::map<std::string, double> out;
  std::map<std::string, int64_t> seen;
  for (const auto& config : trainer.optimizer_configs()) {
    const std::string type = class_name(*config.optimizer);
    const int64_t repeat = seen[type]++;
    if (!include(config)) continue;
    const std::string name = "lr-" + type + (repeat > 0 ? "-" + std::to_string(repeat) : std::string());
    const auto& groups = config.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string key = groups.size() > 1 ? name + "/pg" + std::to_string(g + 1) : name;
      const auto& options = groups[g].options();
      out[key] = options.get_lr();
      if (momentum) out[key + "-momentum"] = momentum_of(options);
      if (weight_decay) out[key + "-weight_decay"] = weight_decay_of(options);
    }
  }
  return out;
}

}  // namespace

LearningRateMonitor::LearningRateMonitor(std::optional<std::string> logging_interval, bool log_momentum,
                                         bool log_weight_decay)
    : log_momentum_(log_momentum), log_weight_decay_(log_weight_decay) {
  if (logging_interval) interval_ = interval_named(*logging_interval, "LearningRateMonitor logging_interval");
}

std::map<std::string, double> LearningRateMonitor::rates(const Trainer& trainer) {
  return collect(trainer, false, false, [](const OptimizerConfig&) { return true; });
}

void LearningRateMonitor::log(Trainer& trainer, Interval interval) const {
  const bool all = interval_ == interval;
  if (interval_ && !all) return;
  // Unset: an optimizer with a scheduler at its scheduler's interval, one without at both.
  trainer.log_to_loggers(collect(trainer, log_momentum_, log_weight_decay_, [&](const OptimizerConfig& config) {
    return all || !config.lr_scheduler || config.lr_scheduler->interval == interval;
  }));
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, TrainModule&) { log(trainer, Interval::epoch); }

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  if (trainer.logging_batch()) log(trainer, Interval::step);
}

}  // namespace arc
