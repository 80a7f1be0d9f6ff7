// Classification metrics with torchmetrics' semantics: Accuracy, Precision, Recall, F1Score and
// ConfusionMatrix from counts, AUROC and AveragePrecision from every prediction (binary and
// multiclass).
#pragma once

#include <arc/base/arg.h>
#include <arc/metrics/metric.h>

#include <string>
#include <utility>

namespace arc::metrics {

/// The settings of the classification metrics (torchmetrics' names and its task wrappers' defaults).
class ClassificationOptions {
 public:
  /// "binary" (targets 0 and 1) or "multiclass" (targets 0 to num_classes - 1).
  ARC_ARG(std::string, task) = "multiclass";
  /// multiclass: how many classes.
  ARC_ARG(int64_t, num_classes) = 0;
  /// binary: a probability at or above it predicts 1 (scores outside [0, 1] are logits and go
  /// through a sigmoid first).
  ARC_ARG(double, threshold) = 0.5;
  /// multiclass: a sample counts as predicted for its top_k highest-scoring classes.
  ARC_ARG(int64_t, top_k) = 1;
  /// multiclass: "micro" (one score from the counts of every class), "macro" (the mean of the
  /// classes' scores, leaving out classes absent from both targets and predictions; for AUROC and
  /// AveragePrecision, those without a positive) or "none" (one score per class).
  ARC_ARG(std::string, average) = "micro";
  /// ConfusionMatrix: "none" (counts), "true" (each row sums to 1), "pred" (each column) or "all".
  ARC_ARG(std::string, normalize) = "none";

 public:
  /// The number of classes the task has: 2 for binary, num_classes for multiclass.
  int64_t classes() const { return task_ == "binary" ? 2 : num_classes_; }
  /// Throws unless the settings make sense for `metric`.
  void validate(const std::string& metric) const;
};

/// Counts per class of true and false positives and negatives, which Accuracy, Precision, Recall and
/// F1Score compute their scores from (torchmetrics' StatScores).
class StatScores : public Metric {
 public:
  /// `metric` names the metric in errors.
  StatScores(ClassificationOptions options, const std::string& metric);
  /// Adds a batch. binary: `preds` probabilities, logits or 0/1 labels, `target` 0/1 labels, of one
  /// shape. multiclass: `preds` (N, C) scores or (N) labels, `target` (N) labels.
  void update(const torch::Tensor& preds, const torch::Tensor& target);
  /// The settings it was made with.
  const ClassificationOptions& options() const { return options_; }

 protected:
  /// `numerator / denominator` per class (0 where the denominator is), reduced as `average` says
  /// (`tp`, `fp`, `fn` decide which classes a macro average leaves out).
  torch::Tensor reduce(const torch::Tensor& numerator, const torch::Tensor& denominator, const torch::Tensor& tp,
                       const torch::Tensor& fp, const torch::Tensor& fn) const;

  /// The settings, and the indices of the states: true and false positives and negatives per class.
  ///@{
  ClassificationOptions options_;
  size_t tp_, fp_, tn_, fn_;
  ///@}
};

/// The fraction of correct predictions (multiclass micro: of samples whose target is among the
/// top_k; macro: the mean of the classes' recall).
class Accuracy : public StatScores {
 public:
  /// Scores as `options` say.
  explicit Accuracy(ClassificationOptions options) : StatScores(std::move(options), "Accuracy") {}
  std::string name() const override { return "Accuracy"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

/// True positives over predicted positives.
class Precision : public StatScores {
 public:
  /// Scores as `options` say.
  explicit Precision(ClassificationOptions options) : StatScores(std::move(options), "Precision") {}
  std::string name() const override { return "Precision"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

/// True positives over actual positives.
class Recall : public StatScores {
 public:
  /// Scores as `options` say.
  explicit Recall(ClassificationOptions options) : StatScores(std::move(options), "Recall") {}
  std::string name() const override { return "Recall"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

/// The harmonic mean of precision and recall: 2 TP / (2 TP + FP + FN).
class F1Score : public StatScores {
 public:
  /// Scores as `options` say.
  explicit F1Score(ClassificationOptions options) : StatScores(std::move(options), "F1Score") {}
  std::string name() const override { return "F1Score"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

/// Counts of (target, prediction) pairs: row i, column j counts samples of class i predicted j.
class ConfusionMatrix : public Metric {
 public:
  /// Counts as `options` say.
  explicit ConfusionMatrix(ClassificationOptions options);
  /// Adds a batch, as StatScores::update takes it (multiclass with the top class only).
  void update(const torch::Tensor& preds, const torch::Tensor& target);
  std::string name() const override { return "ConfusionMatrix"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;

 private:
  ClassificationOptions options_;
  size_t matrix_;
};

/// Keeps every prediction and target, for the metrics that rank them (AUROC, AveragePrecision).
/// Multiclass scores outside [0, 1] go through a softmax, binary ones through a sigmoid.
class RankingMetric : public Metric {
 public:
  /// `metric` names the metric in errors.
  RankingMetric(ClassificationOptions options, const std::string& metric);
  /// Adds a batch: binary `preds` (N) scores and `target` (N) 0/1 labels; multiclass `preds` (N, C)
  /// and `target` (N) labels.
  void update(const torch::Tensor& preds, const torch::Tensor& target);

 protected:
  /// `score(scores, positives)` for binary, or for each class against the rest, averaged as
  /// `average` says (macro leaves out classes without a positive).
  torch::Tensor one_vs_rest(const std::vector<torch::Tensor>& states,
                            double (*score)(const torch::Tensor&, const torch::Tensor&)) const;

  /// The settings, and the indices of the states: every score and every target.
  ///@{
  ClassificationOptions options_;
  size_t preds_, target_;
  ///@}
};

/// The area under the ROC curve (0 without a positive or a negative), as sklearn's roc_auc_score
/// (multiclass: one class against the rest).
class AUROC : public RankingMetric {
 public:
  /// `average` defaults to "macro", as torchmetrics' AUROC.
  explicit AUROC(ClassificationOptions options = ClassificationOptions().average("macro"));
  std::string name() const override { return "AUROC"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

/// The precision at each threshold weighted by the recall it adds, as sklearn's
/// average_precision_score (NaN without a positive).
class AveragePrecision : public RankingMetric {
 public:
  /// `average` defaults to "macro", as torchmetrics' AveragePrecision.
  explicit AveragePrecision(ClassificationOptions options = ClassificationOptions().average("macro"));
  std::string name() const override { return "AveragePrecision"; }

 protected:
  torch::Tensor compute_from(const std::vector<torch::Tensor>& states) const override;
};

}  // namespace arc::metrics
