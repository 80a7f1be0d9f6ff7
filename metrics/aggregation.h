// Aggregators with torchmetrics' semantics: MeanMetric (weighted), SumMetric, MaxMetric, MinMetric
// and CatMetric, over every value updated on every rank.
#pragma once

#include <arc/base/arg.h>
#include <arc/metrics/metric.h>

#include <string>

namespace arc::metrics {

/// What an aggregator does with NaN values (torchmetrics' nan_strategy): "warn" (leave them out,
/// and say so once), "ignore" (leave them out), "error" (throw) or "disable" (keep them: the result
/// is NaN, or holds them).
class AggregationOptions {
 public:
  /// "warn", "ignore", "error" or "disable".
  ARC_ARG(std::string, nan_strategy) = "warn";
};

/// Keeps its values' NaN handling; the base of the aggregators.
class Aggregator : public Metric {
 public:
  /// `metric` names the aggregator in errors.
  Aggregator(AggregationOptions options, const std::string& metric);

 protected:
  /// The elements of `values` (and `weights`, of their shape) as flat doubles, NaN values (and their
  /// weights) handled as nan_strategy says.
  std::pair<torch::Tensor, torch::Tensor> values_of(const torch::Tensor& values, const torch::Tensor& weights);

 private:
  AggregationOptions options_;
  bool warned_ = false;
};

/// The mean of every value, each weighted (1 unless given).
class MeanMetric : public Aggregator {
 public:
  /// Handles NaN values as `options` say.
  explicit MeanMetric(AggregationOptions options = AggregationOptions());
  /// Adds `value` (a tensor or a number), each element weighted by `weight`'s (broadcast to its shape).
  void update(const torch::Tensor& value, const torch::Tensor& weight);
  /// Adds `value` with weight `weight`.
  void update(const torch::Tensor& value, double weight = 1.0);
  std::string name() const override { return "MeanMetric"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t sum_, weight_;
};

/// The sum of every value.
class SumMetric : public Aggregator {
 public:
  /// Handles NaN values as `options` say.
  explicit SumMetric(AggregationOptions options = AggregationOptions());
  /// Adds every element of `value`.
  void update(const torch::Tensor& value);
  std::string name() const override { return "SumMetric"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t sum_;
};

/// The largest value (-inf before any).
class MaxMetric : public Aggregator {
 public:
  /// Handles NaN values as `options` say.
  explicit MaxMetric(AggregationOptions options = AggregationOptions());
  /// Takes in every element of `value`.
  void update(const torch::Tensor& value);
  std::string name() const override { return "MaxMetric"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t max_;
};

/// The smallest value (inf before any).
class MinMetric : public Aggregator {
 public:
  /// Handles NaN values as `options` say.
  explicit MinMetric(AggregationOptions options = AggregationOptions());
  /// Takes in every element of `value`.
  void update(const torch::Tensor& value);
  std::string name() const override { return "MinMetric"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t min_;
};

/// Every value, flat, in the order updated (rank by rank).
class CatMetric : public Aggregator {
 public:
  /// Handles NaN values as `options` say.
  explicit CatMetric(AggregationOptions options = AggregationOptions());
  /// Appends every element of `value`, flat.
  void update(const torch::Tensor& value);
  std::string name() const override { return "CatMetric"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t values_;
};

}  // namespace arc::metrics
