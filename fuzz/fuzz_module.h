// The module, data and Trainer options that the checkpoint seeds are written with and that the
// checkpoint target resumes into: two layers, Adam and a step-wise StepLR, so that a checkpoint
// holds parameters, optimizer state, a scheduler's state and the loops' counters.
#pragma once

#include <arc/arc.h>

#include <torch/torch.h>

#include <string>

namespace arc::fuzz {

class FuzzModule : public TrainModule {
 public:
  FuzzModule() : TrainModule("FuzzModule") {
    hidden = register_module("hidden", torch::nn::Linear(4, 3));
    out = register_module("out", torch::nn::Linear(3, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    return torch::mse_loss(out(torch::relu(hidden(batch[0]))), batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto adam = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    return {OptimizerConfig(adam, SchedulerConfig{std::make_shared<StepLR>(*adam, 2, 0.5), Interval::step, 1, ""})};
  }

  torch::nn::Linear hidden{nullptr}, out{nullptr};
};

/// 8 samples in batches of 2.
inline DataSource fuzz_data() {
  auto x = torch::arange(32, torch::kFloat).reshape({8, 4}).div(32.0);
  return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, x.sum(1, true)}), DataLoaderOptions(2)};
}

/// Quiet, single-threaded, writing nothing of its own under `root`.
inline TrainerOptions fuzz_options(const std::string& root) {
  return TrainerOptions()
      .logger(false)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .enable_checkpointing(false)
      .num_threads(1)
      .max_epochs(2)
      .default_root_dir(root);
}

}  // namespace arc::fuzz
