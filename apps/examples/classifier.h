// Classifier: the canonical workload's training recipe (cross-entropy, SGD with momentum,
// validation loss and accuracy), shared by the MLP and CNN examples.
#pragma once

#include <arc/base/config.h>
#include <arc/core/train_module.h>
#include <arc/strategies/sharded_unit.h>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace arc::examples {

/// Subclasses define forward(); this class trains it as WORKLOAD.md §5 says.
class Classifier : public TrainModule {
 public:
  /// Reads lr (0.05) and momentum (0.9) from the module's config section.
  Classifier(const std::string& name, const Config& config);

  virtual torch::Tensor forward(const torch::Tensor& x) = 0;

  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override;
  void validation_step(Batch& batch, int64_t batch_idx) override;
  void test_step(Batch& batch, int64_t batch_idx) override;
  torch::Tensor predict_step(Batch& batch, int64_t batch_idx) override;
  std::vector<OptimizerConfig> configure_optimizers() override;

 protected:
  /// Sets the canonical initial weights (WORKLOAD.md §4) and records hyper-parameters.
  void finish_construction(nlohmann::json hparams);

 private:
  void evaluate(Batch& batch, const std::string& prefix);

  double lr_;
  double momentum_;
};

/// Linear(784,h) → ReLU → Linear(h,h) → ReLU → Linear(h,10); config: hidden (256), lr, momentum.
/// Each layer is an arc::ShardedUnit (the Linear itself unless the strategy is fsdp's FULL_SHARD), as
/// are the CNN's.
class MlpClassifier : public Classifier {
 public:
  explicit MlpClassifier(const Config& config);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  ShardedUnit<torch::nn::Linear> fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

/// Conv(1,16,5) → ReLU → MaxPool(2) → Conv(16,32,5) → ReLU → MaxPool(2) → Linear(1568,10).
class CnnClassifier : public Classifier {
 public:
  explicit CnnClassifier(const Config& config);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  ShardedUnit<torch::nn::Conv2d> conv1_{nullptr}, conv2_{nullptr};
  ShardedUnit<torch::nn::Linear> fc_{nullptr};
};

}  // namespace arc::examples
