// A small module and dataset for Trainer tests: Linear(4, 1) regression that counts every hook
// and step it sees.
#pragma once

#include <arc/arc.h>

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace arc::testing {

/// `n` samples of 4 features and a linear target; deterministic.
inline std::vector<torch::Tensor> tiny_tensors(int64_t n) {
  auto x = torch::arange(n * 4, torch::kFloat).reshape({n, 4}).div(static_cast<double>(n * 4));
  auto y = x.sum(1, true) * 2 - 1;
  return {x, y};
}

/// tiny_tensors(n) as a dataset.
inline DataSource tiny_data(int64_t n, int64_t batch_size) {
  return {std::make_shared<TensorDataset>(tiny_tensors(n)), DataLoaderOptions(batch_size)};
}

/// Counts calls by name; the sequence of hook names is kept too.
class TinyModule : public TrainModule {
 public:
  explicit TinyModule(double lr = 0.1) : TrainModule("TinyModule"), lr_(lr) {
    linear = register_module("linear", torch::nn::Linear(4, 1));
  }

  torch::Tensor training_step(Batch& batch, int64_t) override {
    ++counts["training_step"];
    seen_first_values.push_back(batch[0][0][0].item<float>());
    auto loss = torch::mse_loss(linear(batch[0]), batch[1]);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(Batch& batch, int64_t) override {
    ++counts["validation_step"];
    log("val_loss", torch::mse_loss(linear(batch[0]), batch[1]));
  }
  void test_step(Batch& batch, int64_t) override {
    ++counts["test_step"];
    log("test_loss", torch::mse_loss(linear(batch[0]), batch[1]));
  }
  torch::Tensor predict_step(Batch& batch, int64_t) override {
    ++counts["predict_step"];
    return linear(batch[0]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_))};
  }
  void on_train_epoch_start() override { record("on_train_epoch_start"); }
  void on_train_epoch_end() override { record("on_train_epoch_end"); }
  void on_validation_start() override { record("on_validation_start"); }
  void on_validation_end() override { record("on_validation_end"); }
  void on_fit_start() override { record("on_fit_start"); }
  void on_fit_end() override { record("on_fit_end"); }
  void on_train_start() override { record("on_train_start"); }
  void on_train_end() override { record("on_train_end"); }
  void on_before_backward(const torch::Tensor&) override { record("on_before_backward"); }
  void on_after_backward() override { record("on_after_backward"); }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { record("on_before_optimizer_step"); }
  void on_before_zero_grad(torch::optim::Optimizer&) override { record("on_before_zero_grad"); }

  void record(const std::string& hook) {
    ++counts[hook];
    hooks.push_back(hook);
  }

  torch::nn::Linear linear{nullptr};
  std::map<std::string, int64_t> counts;
  std::vector<std::string> hooks;
  std::vector<float> seen_first_values;

 private:
  double lr_;
};

/// Saves a checkpoint after global batch `at`, then stops the run, as a crash right after it would.
class StopAfter : public Callback {
 public:
  StopAfter(int64_t at, std::string path) : at_(at), path_(std::move(path)) {}
  std::string state_key() const override { return "StopAfter"; }
  void on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) override {
    if (trainer.progress().total_batches != at_) return;
    trainer.save_checkpoint(path_);
    trainer.request_stop("interrupted for the test");
  }

 private:
  int64_t at_;
  std::string path_;
};

/// Every parameter of `module`, flattened into one tensor (a copy).
inline torch::Tensor weights_of(torch::nn::Module& module) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : module.parameters()) parts.push_back(p.detach().flatten().clone());
  return torch::cat(parts);
}

/// Options for fast, quiet tests: no progress bar, summary, checkpoints or default logger, one thread.
inline TrainerOptions quiet() {
  return TrainerOptions()
      .logger(false)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .enable_checkpointing(false)
      .num_threads(1);
}

}  // namespace arc::testing
