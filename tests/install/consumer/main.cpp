// Trains a one-layer regression with the installed Arclight and reports whether the loss fell.
#include <arc/arc.h>

#include <torch/torch.h>

#include <iostream>

class Regression : public arc::TrainModule {
 public:
  Regression() { linear_ = register_module("linear", torch::nn::Linear(3, 1)); }
  torch::Tensor training_step(arc::Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(linear_(batch[0]), batch[1]);
    log("loss", loss, arc::LogOptions().on_epoch(true));
    return loss;
  }
  std::vector<arc::OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1))};
  }

 private:
  torch::nn::Linear linear_{nullptr};
};

int main() {
  torch::manual_seed(0);
  auto x = torch::rand({64, 3});
  auto y = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f})).unsqueeze(1);
  auto data = std::make_shared<arc::TensorDataset>(std::vector<torch::Tensor>{x, y});
  Regression module;
  arc::Trainer first(arc::TrainerOptions().max_epochs(1).enable_progress_bar(false).enable_model_summary(false));
  first.fit(module, {data, arc::DataLoaderOptions(8)});
  const double before = first.callback_metrics().at("loss_epoch");
  arc::Trainer more(arc::TrainerOptions().max_epochs(20).enable_progress_bar(false).enable_model_summary(false));
  more.fit(module, {data, arc::DataLoaderOptions(8)});
  const double after = more.callback_metrics().at("loss_epoch");
  std::cout << "consumer trained: loss " << before << " -> " << after
            << (after < before ? " decreased" : " did not fall") << std::endl;
  return after < before ? 0 : 1;
}
