// The MLP and CNN examples on the canonical workload.
#include <arc/apps/examples/classifier.h>

#include <arc/apps/examples/workload.h>
#include <arc/callbacks/finetuning.h>
#include <arc/core/module_registry.h>

#include <torch/torch.h>

namespace arc::examples {

Classifier::Classifier(const std::string& name, const Config& config)
    : TrainModule(name), lr_(config.get<double>("lr", 0.05)), momentum_(config.get<double>("momentum", 0.9)) {
  ARC_CHECK(lr_ > 0, "module.lr must be > 0, got ", lr_);
  ARC_CHECK(momentum_ >= 0 && momentum_ < 1, "module.momentum must be in [0, 1), got ", momentum_);
}

void Classifier::finish_construction(nlohmann::json hparams) {
  workload::init_parameters(*this);
  hparams["lr"] = lr_;
  hparams["momentum"] = momentum_;
  save_hyperparameters(std::move(hparams));
}

torch::Tensor Classifier::training_step(Batch& batch, int64_t) {
  auto loss = torch::nn::functional::cross_entropy(forward(batch[0]), batch[1]);
  log("train_loss", loss, LogOptions().prog_bar(true));
  return loss;
}

void Classifier::evaluate(Batch& batch, const std::string& prefix) {
  const auto logits = forward(batch[0]);
  const auto& labels = batch[1];
  // Under DDP each rank sees a shard; sync_dist gives the mean over all samples.
  log(prefix + "_loss", torch::nn::functional::cross_entropy(logits, labels),
      LogOptions().prog_bar(true).sync_dist(true));
  log(prefix + "_acc", logits.argmax(1).eq(labels).to(torch::kDouble).mean(),
      LogOptions().prog_bar(true).sync_dist(true));
}

void Classifier::validation_step(Batch& batch, int64_t) { evaluate(batch, "val"); }

void Classifier::test_step(Batch& batch, int64_t) { evaluate(batch, "test"); }

torch::Tensor Classifier::predict_step(Batch& batch, int64_t) { return forward(batch[0]).argmax(1); }

// WORKLOAD.md's SGD, unless the config names an optimizer (or a scheduler) of its own, over the
// parameters that require gradients (all of them, unless a finetuning callback froze some). The rate
// is the hyper-parameter's, where a LearningRateFinder writes the one it found.
std::vector<OptimizerConfig> Classifier::configure_optimizers() {
  const auto trainable = BaseFinetuning::filter_params(*this);
  const auto lr = hparams().at("lr").get<double>();
  return {configured_optimizer(trainable, [&] {
    return OptimizerConfig(
        std::make_shared<torch::optim::SGD>(trainable, torch::optim::SGDOptions(lr).momentum(momentum_)));
  })};
}

MlpClassifier::MlpClassifier(const Config& config) : Classifier("MlpClassifier", config) {
  const auto hidden = config.get<int64_t>("hidden", 256);
  ARC_CHECK(hidden >= 1, "module.hidden must be >= 1, got ", hidden);
  fc1_ = register_module("fc1", ShardedUnit<torch::nn::Linear>(torch::nn::Linear(workload::kFeatures, hidden)));
  fc2_ = register_module("fc2", ShardedUnit<torch::nn::Linear>(torch::nn::Linear(hidden, hidden)));
  fc3_ = register_module("fc3", ShardedUnit<torch::nn::Linear>(torch::nn::Linear(hidden, workload::kClasses)));
  finish_construction({{"hidden", hidden}});
}

torch::Tensor MlpClassifier::forward(const torch::Tensor& x) { return fc3_(torch::relu(fc2_(torch::relu(fc1_(x))))); }

CnnClassifier::CnnClassifier(const Config& config) : Classifier("CnnClassifier", config) {
  conv1_ = register_module(
      "conv1", ShardedUnit<torch::nn::Conv2d>(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2))));
  conv2_ = register_module(
      "conv2", ShardedUnit<torch::nn::Conv2d>(torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2))));
  fc_ = register_module("fc", ShardedUnit<torch::nn::Linear>(torch::nn::Linear(32 * 7 * 7, workload::kClasses)));
  finish_construction(nlohmann::json::object());
}

torch::Tensor CnnClassifier::forward(const torch::Tensor& x) {
  auto h = x.view({-1, 1, 28, 28});
  h = torch::max_pool2d(torch::relu(conv1_(h)), 2);
  h = torch::max_pool2d(torch::relu(conv2_(h)), 2);
  return fc_(h.flatten(1));
}

ARC_REGISTER_MODULE(MlpClassifier, "mlp_classifier", "canonical");
ARC_REGISTER_MODULE(CnnClassifier, "cnn_classifier", "canonical");

}  // namespace arc::examples
