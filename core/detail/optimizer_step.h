// step_optimizers: the one optimizer-step sequence, shared by the automatic loop and manual
// optimization (ManualOptimizer::step).
#pragma once

#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace arc {

class Trainer;
class TrainModule;

namespace detail {

struct RunState;

/// In Lightning's order: gradients unscaled (under "16-mixed"), on_before_optimizer_step for each
/// optimizer (the module's, then the callbacks'), gradients clipped when `clip` (gradient_clip_val),
/// every optimizer stepped, the loss scale updated, the global step advanced.
void step_optimizers(Trainer& trainer, TrainModule& module, RunState& state,
                     const std::vector<torch::optim::Optimizer*>& optimizers, bool clip);

}  // namespace detail
}  // namespace arc
