// step_optimizer: the one optimizer-step sequence, shared by the automatic loop (which steps the one
// optimizer automatic optimization allows) and manual optimization (ManualOptimizer::step).
#pragma once

namespace torch::optim {
class Optimizer;
}

namespace arc {

class Trainer;
class TrainModule;

namespace detail {

struct RunState;

/// In Lightning's order: gradients unscaled (under "16-mixed"), on_before_optimizer_step (the
/// callbacks', then the module's), gradients clipped when `clip` (gradient_clip_val), the optimizer
/// stepped, the loss scale updated, the global step advanced.
void step_optimizer(Trainer& trainer, TrainModule& module, RunState& state, torch::optim::Optimizer& optimizer,
                    bool clip);

}  // namespace detail
}  // namespace arc
