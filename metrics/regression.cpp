// Regression metrics: sums of errors and of targets, in double.
#include <arc/metrics/regression.h>

#include <arc/base/error.h>

#include <torch/torch.h>

namespace arc::metrics {
namespace {

// `preds` and `target` as flat doubles on the CPU, after checking that they have one shape.
std::pair<torch::Tensor, torch::Tensor> flat_pair(const std::string& metric, const torch::Tensor& preds,
                                                  const torch::Tensor& target) {
  ARC_CHECK(preds.sizes() == target.sizes(), metric, ": preds and target must have one shape, but got ", preds.sizes(),
            " and ", target.sizes());
  return {preds.detach().cpu().to(torch::kDouble).reshape({-1}),
          target.detach().cpu().to(torch::kDouble).reshape({-1})};
}

torch::Tensor zero() { return torch::zeros({}, torch::kDouble); }

}  // namespace

MeanSquaredError::MeanSquaredError(bool squared) : squared_(squared) {
  sum_ = add_state("sum_squared_error", zero(), StateReduce::sum);
  count_ = add_state("total", torch::zeros({}, torch::kLong), StateReduce::sum);
}

void MeanSquaredError::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    const auto [p, t] = flat_pair(name(), preds, target);
    state(sum_) += (p - t).square().sum();
    state(count_) += p.numel();
  });
}

torch::Tensor MeanSquaredError::compute_from(const std::vector<torch::Tensor>& s) const {
  const auto mean = s[sum_] / s[count_].to(torch::kDouble);
  return squared_ ? mean : mean.sqrt();
}

MeanAbsoluteError::MeanAbsoluteError() {
  sum_ = add_state("sum_abs_error", zero(), StateReduce::sum);
  count_ = add_state("total", torch::zeros({}, torch::kLong), StateReduce::sum);
}

void MeanAbsoluteError::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    const auto [p, t] = flat_pair(name(), preds, target);
    state(sum_) += (p - t).abs().sum();
    state(count_) += p.numel();
  });
}

torch::Tensor MeanAbsoluteError::compute_from(const std::vector<torch::Tensor>& s) const {
  return s[sum_] / s[count_].to(torch::kDouble);
}

R2Score::R2Score() {
  observed_ = add_state("sum_obs", zero(), StateReduce::sum);
  observed_squares_ = add_state("sum_squared_obs", zero(), StateReduce::sum);
  residual_squares_ = add_state("rss", zero(), StateReduce::sum);
  count_ = add_state("total", torch::zeros({}, torch::kLong), StateReduce::sum);
}

void R2Score::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    const auto [p, t] = flat_pair(name(), preds, target);
    state(observed_) += t.sum();
    state(observed_squares_) += t.square().sum();
    state(residual_squares_) += (t - p).square().sum();
    state(count_) += t.numel();
  });
}

torch::Tensor R2Score::compute_from(const std::vector<torch::Tensor>& s) const {
  const auto n = s[count_].to(torch::kDouble);
  ARC_CHECK(n.item<double>() >= 2, "R2Score needs at least two samples, but got ", n.item<double>(),
            "; update it with more before compute");
  const auto total = s[observed_squares_] - s[observed_] * s[observed_] / n;
  return 1 - s[residual_squares_] / total;
}

}  // namespace arc::metrics
