// step_optimizer.
#include <arc/core/detail/optimizer_step.h>

#include <arc/core/detail/run_state.h>

#include <torch/torch.h>

namespace arc::detail {
namespace {

void clip_gradients(const TrainerOptions& options, torch::optim::Optimizer& optimizer) {
  if (!options.gradient_clip_val() || *options.gradient_clip_val() == 0) return;
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params())
      if (parameter.grad().defined()) parameters.push_back(parameter);
  if (options.gradient_clip_algorithm() == "value") {
    torch::nn::utils::clip_grad_value_(parameters, *options.gradient_clip_val());
  } else {
    torch::nn::utils::clip_grad_norm_(parameters, *options.gradient_clip_val(), 2.0);
  }
}

}  // namespace

void step_optimizer(Trainer& trainer, TrainModule& module, RunState& state, torch::optim::Optimizer& optimizer,
                    bool clip) {
  auto& precision = trainer.precision();
  // Hooks and clipping see gradients at their true size.
  precision.unscale(optimizer);
  call_hook(trainer, module, "on_before_optimizer_step", &Callback::on_before_optimizer_step,
            &TrainModule::on_before_optimizer_step, optimizer);
  ProfileScope scope(trainer.profiler(), "[Trainer].optimizer_step");
  if (clip) clip_gradients(trainer.options(), optimizer);
  precision.optimizer_step(optimizer);
  precision.update();
  ++state.progress.global_step;
}

}  // namespace arc::detail
