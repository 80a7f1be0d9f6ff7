// The hand-written loop.
#include <arc/apps/examples/hand_loop.h>

#include <torch/torch.h>

namespace arc::examples {

std::vector<float> train_by_hand(torch::nn::Module& model,
                                 const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                 const torch::Tensor& x, const torch::Tensor& y, const std::vector<int64_t>& order,
                                 int64_t batch_size, double lr, double momentum) {
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  model.train();
  std::vector<float> losses;
  const auto total = static_cast<int64_t>(order.size());
  for (int64_t begin = 0; begin < total; begin += batch_size) {
    const int64_t count = std::min(batch_size, total - begin);
    const auto index = torch::from_blob(const_cast<int64_t*>(order.data() + begin), {count}, torch::kLong);
    const auto inputs = x.index_select(0, index);
    const auto labels = y.index_select(0, index);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(forward(inputs), labels);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

}  // namespace arc::examples
