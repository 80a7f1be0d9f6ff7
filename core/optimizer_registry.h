// Optimizers and LR schedulers a config names, as LightningCLI's top-level `optimizer` and
// `lr_scheduler`: {"class_path": <name>, "init_args": {...}}. Modules opt in by building their
// optimizer through TrainModule::configured_optimizer.
#pragma once

#include <arc/base/class_path.h>
#include <arc/core/train_module.h>

#include <torch/types.h>

#include <memory>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace arc {

/// LibTorch's optimizers by class name ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad"), each built over
/// the parameters from its init_args (PyTorch's option names: lr, momentum, weight_decay, betas, eps...).
Registry<torch::optim::Optimizer, std::vector<torch::Tensor>, const Config&>& optimizer_registry();

/// Arclight's schedulers by class name ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
/// "LinearWarmup", "ReduceLROnPlateau"), built for an optimizer from init_args; besides the scheduler's
/// own arguments, init_args may set Lightning's interval ("epoch" or "step"), frequency and monitor.
Registry<SchedulerConfig, torch::optim::Optimizer&, const Config&>& lr_scheduler_registry();

}  // namespace arc
