// The hand-written LibTorch loop the Trainer is compared with: the same steps, no framework.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <vector>

namespace arc::examples {

/// One epoch of SGD over `x`/`y` in `order`, batches of `batch_size`, as WORKLOAD.md §5:
/// zero_grad, forward, cross-entropy, backward, step. Returns the per-step losses.
std::vector<float> train_by_hand(torch::nn::Module& model,
                                 const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                 const torch::Tensor& x, const torch::Tensor& y, const std::vector<int64_t>& order,
                                 int64_t batch_size, double lr, double momentum);

}  // namespace arc::examples
