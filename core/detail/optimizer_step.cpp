// step_optimizers.
#include <arc/core/detail/optimizer_step.h>

#include <arc/core/detail/run_state.h>

#include <torch/torch.h>

namespace arc::detail {
namespace {

void clip_gradients(const TrainerOptions& options, const std::vector<torch::optim::Optimizer*>& optimizers) {
  if (!options.gradient_clip_val() || *options.gradient_clip_val() == 0) return;
  std::vector<torch::Tensor> parameters;
  for (auto* optimizer : optimizers)
    for (auto& group : optimizer->param_groups())
      for (auto& parameter : group.params())
        if (parameter.grad().defined()) parameters.push_back(parameter);
  if (options.gradient_clip_algorithm() == "value") {
    torch::nn::utils::clip_grad_value_(parameters, *options.gradient_clip_val());
  } else {
    torch::nn::utils::clip_grad_norm_(parameters, *options.gradient_clip_val(), 2.0);
  }
}

}  // namespace

void step_optimizers(Trainer& trainer, TrainModule& module, RunState& state,
                     const std::vector<torch::optim::Optimizer*>& optimizers, bool clip) {
  auto& precision = trainer.precision();
  // Hooks and clipping see gradients at their true size.
  for (auto* optimizer : optimizers) precision.unscale(*optimizer);
  for (auto* optimizer : optimizers)
    call_hook(trainer, module, &Callback::on_before_optimizer_step, &TrainModule::on_before_optimizer_step, *optimizer);
  if (clip) clip_gradients(trainer.options(), optimizers);
  for (auto* optimizer : optimizers) precision.optimizer_step(*optimizer);
  precision.update();
  ++state.progress.global_step;
}

}  // namespace arc::detail
