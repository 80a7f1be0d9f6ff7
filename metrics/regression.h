// Regression metrics with torchmetrics' semantics: MeanSquaredError, MeanAbsoluteError, R2Score.
#pragma once

#include <arc/metrics/metric.h>

#include <string>

namespace arc::metrics {

/// The mean of (preds - target)^2 over every element; its square root with `squared` false (RMSE).
class MeanSquaredError : public Metric {
 public:
  /// The mean squared error, or with `squared` false its root.
  explicit MeanSquaredError(bool squared = true);
  /// Adds a batch: `preds` and `target` of one shape.
  void update(const torch::Tensor& preds, const torch::Tensor& target);
  std::string name() const override { return "MeanSquaredError"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  bool squared_;
  size_t sum_, count_;
};

/// The mean of |preds - target| over every element.
class MeanAbsoluteError : public Metric {
 public:
  MeanAbsoluteError();
  /// Adds a batch: `preds` and `target` of one shape.
  void update(const torch::Tensor& preds, const torch::Tensor& target);
  std::string name() const override { return "MeanAbsoluteError"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t sum_, count_;
};

/// The coefficient of determination, 1 - (residual sum of squares) / (total sum of squares), over
/// every element as one output.
class R2Score : public Metric {
 public:
  R2Score();
  /// Adds a batch: `preds` and `target` of one shape.
  void update(const torch::Tensor& preds, const torch::Tensor& target);
  std::string name() const override { return "R2Score"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  size_t observed_, observed_squares_, residual_squares_, count_;
};

}  // namespace arc::metrics
