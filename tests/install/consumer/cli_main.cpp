// A program of its own with Arclight's command line, as LightningCLI(Regression, RegressionData):
// `consumer_cli fit --config cli.yaml` trains, `consumer_cli validate --ckpt last` evaluates.
#include <arc/arc.h>
#include <arc/cli/cli.h>

#include <torch/torch.h>

namespace consumer {

// y = x · (1, -2, 0.5) on `samples` points spread over [-1, 1]^3 without a random generator, so
// that every rank and every run sees the same data.
class RegressionData : public arc::DataModule {
 public:
  explicit RegressionData(const arc::Config& config)
      : batch_size_(config.get<int64_t>("batch_size", 16)), samples_(config.get<int64_t>("samples", 256)) {}

  arc::DataSource train_dataloader() override { return {dataset(), arc::DataLoaderOptions(batch_size_).shuffle(true)}; }
  arc::DataSource val_dataloader() override { return {dataset(), arc::DataLoaderOptions(batch_size_)}; }

 private:
  std::shared_ptr<arc::TensorDataset> dataset() const {
    const auto x = torch::sin(torch::arange(samples_ * 3, torch::kFloat).reshape({samples_, 3}) * 0.37f);
    const auto y = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f})).unsqueeze(1);
    return std::make_shared<arc::TensorDataset>(std::vector<torch::Tensor>{x, y});
  }

  int64_t batch_size_;
  int64_t samples_;
};

class Regression : public arc::TrainModule {
 public:
  explicit Regression(const arc::Config& config) : lr_(config.get<double>("lr", 0.1)) {
    linear_ = register_module("linear", torch::nn::Linear(3, 1));
  }
  torch::Tensor training_step(arc::Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(linear_(batch[0]), batch[1]);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(arc::Batch& batch, int64_t) override {
    log("val_loss", torch::mse_loss(linear_(batch[0]), batch[1]), arc::LogOptions().sync_dist(true));
  }
  std::vector<arc::OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_))};
  }

 private:
  double lr_;
  torch::nn::Linear linear_{nullptr};
};

}  // namespace consumer

int main(int argc, char** argv) { return arc::cli::main<consumer::Regression, consumer::RegressionData>(argc, argv); }
