// LearningRateMonitor.
#include <arc/callbacks/learning_rate_monitor.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <torch/optim/optimizer.h>

#include <cxxabi.h>
#include <cstdlib>
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

}  // namespace

LearningRateMonitor::LearningRateMonitor(std::string logging_interval) : interval_(std::move(logging_interval)) {
  ARC_CHECK(interval_ == "step" || interval_ == "epoch", "LearningRateMonitor logging_interval must be \"step\" or ",
            "\"epoch\", got \"", interval_, "\"");
}

// Lightning's names: "lr-<class>", "-<k>" for the k-th further optimizer of that class, and
// "/pg<j>" (from 1) when an optimizer has several parameter groups.
std::map<std::string, double> LearningRateMonitor::rates(const Trainer& trainer) {
  std::map<std::string, double> out;
  std::map<std::string, int64_t> seen;
  for (const auto& config : trainer.optimizer_configs()) {
    const std::string type = class_name(*config.optimizer);
    const int64_t repeat = seen[type]++;
    const std::string name = "lr-" + type + (repeat > 0 ? "-" + std::to_string(repeat) : std::string());
    const auto& groups = config.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      out[groups.size() > 1 ? name + "/pg" + std::to_string(g + 1) : name] = groups[g].options().get_lr();
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
