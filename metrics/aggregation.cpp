// Aggregators: sums, extremes and concatenations of values, in double.
#include <arc/metrics/aggregation.h>

#include <arc/base/console.h>
#include <arc/base/error.h>

#include <torch/torch.h>

#include <limits>

namespace arc::metrics {

Aggregator::Aggregator(AggregationOptions options, const std::string& metric) : options_(std::move(options)) {
  check_choice(metric + " nan_strategy", options_.nan_strategy(), {"warn", "ignore", "error", "disable"});
}

std::pair<torch::Tensor, torch::Tensor> Aggregator::values_of(const torch::Tensor& values,
                                                              const torch::Tensor& weights) {
  auto flat = values.detach().cpu().to(torch::kDouble).reshape({-1});
  auto flat_weights = weights.detach().cpu().to(torch::kDouble).expand_as(values.detach().cpu()).reshape({-1});
  const auto& strategy = options_.nan_strategy();
  if (strategy == "disable") return {flat, flat_weights};
  const auto nan = torch::isnan(flat);
  if (!nan.any().item<bool>()) return {flat, flat_weights};
  ARC_CHECK(strategy != "error", name(), ": a value is NaN, and nan_strategy is \"error\"; leave NaN values out, or ",
            "set nan_strategy to \"warn\", \"ignore\" or \"disable\"");
  if (strategy == "warn" && !warned_) {
    console().warn("{}: NaN values are left out (nan_strategy \"warn\"; \"ignore\" leaves them out silently)", name());
    warned_ = true;
  }
  return {flat.index({~nan}), flat_weights.index({~nan})};
}

MeanMetric::MeanMetric(AggregationOptions options) : Aggregator(std::move(options), "MeanMetric") {
  sum_ = add_state("mean_value", torch::zeros({}, torch::kDouble), StateReduce::sum);
  weight_ = add_state("weight", torch::zeros({}, torch::kDouble), StateReduce::sum);
}

void MeanMetric::update(const torch::Tensor& value, const torch::Tensor& weight) {
  add_batch([&] {
    const auto [values, weights] = values_of(value, weight);
    state(sum_) += (values * weights).sum();
    state(weight_) += weights.sum();
  });
}

void MeanMetric::update(const torch::Tensor& value, double weight) {
  update(value, torch::scalar_tensor(weight, torch::kDouble));
}

torch::Tensor MeanMetric::compute_from(const std::vector<torch::Tensor>& s) const { return s[sum_] / s[weight_]; }

namespace {

torch::Tensor ones() { return torch::scalar_tensor(1.0, torch::kDouble); }

}  // namespace

SumMetric::SumMetric(AggregationOptions options) : Aggregator(std::move(options), "SumMetric") {
  sum_ = add_state("sum_value", torch::zeros({}, torch::kDouble), StateReduce::sum);
}

void SumMetric::update(const torch::Tensor& value) {
  add_batch([&] { state(sum_) += values_of(value, ones()).first.sum(); });
}

torch::Tensor SumMetric::compute_from(const std::vector<torch::Tensor>& s) const { return s[sum_]; }

MaxMetric::MaxMetric(AggregationOptions options) : Aggregator(std::move(options), "MaxMetric") {
  max_ = add_state("max_value", torch::full({}, -std::numeric_limits<double>::infinity(), torch::kDouble),
                   StateReduce::max);
}

void MaxMetric::update(const torch::Tensor& value) {
  add_batch([&] {
    const auto values = values_of(value, ones()).first;
    if (values.numel() > 0) state(max_) = torch::maximum(state(max_), values.max());
  });
}

torch::Tensor MaxMetric::compute_from(const std::vector<torch::Tensor>& s) const { return s[max_]; }

MinMetric::MinMetric(AggregationOptions options) : Aggregator(std::move(options), "MinMetric") {
  min_ = add_state("min_value", torch::full({}, std::numeric_limits<double>::infinity(), torch::kDouble),
                   StateReduce::min);
}

void MinMetric::update(const torch::Tensor& value) {
  add_batch([&] {
    const auto values = values_of(value, ones()).first;
    if (values.numel() > 0) state(min_) = torch::minimum(state(min_), values.min());
  });
}

torch::Tensor MinMetric::compute_from(const std::vector<torch::Tensor>& s) const { return s[min_]; }

CatMetric::CatMetric(AggregationOptions options) : Aggregator(std::move(options), "CatMetric") {
  values_ = add_state("value", torch::zeros({0}, torch::kDouble), StateReduce::cat);
}

void CatMetric::update(const torch::Tensor& value) {
  add_batch([&] { append(values_, values_of(value, ones()).first); });
}

torch::Tensor CatMetric::compute_from(const std::vector<torch::Tensor>& s) const { return s[values_]; }

}  // namespace arc::metrics
