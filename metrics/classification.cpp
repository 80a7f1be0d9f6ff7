// Classification metrics: counts per class, and curves over every prediction.
#include <arc/metrics/classification.h>

#include <arc/base/error.h>

#include <torch/torch.h>

#include <cmath>

namespace arc::metrics {
namespace {

// Binary scores as 0/1 predictions: logits (any value outside [0, 1]) through a sigmoid, then at or
// above the threshold; labels as they are.
torch::Tensor binary_predictions(const torch::Tensor& preds, double threshold) {
  if (!preds.is_floating_point()) return preds.to(torch::kLong);
  auto probabilities = preds.to(torch::kDouble);
  if (((probabilities < 0) | (probabilities > 1)).any().item<bool>()) probabilities = torch::sigmoid(probabilities);
  return (probabilities >= threshold).to(torch::kLong);
}

void check_labels(const std::string& metric, const torch::Tensor& labels, int64_t classes, const char* what) {
  ARC_CHECK(!labels.is_floating_point(), metric, ": ", what, " must be integer labels, but got ", labels.scalar_type(),
            " values; pass class indices (argmax of scores)");
  if (labels.numel() == 0) return;
  const auto low = labels.min().item<int64_t>(), high = labels.max().item<int64_t>();
  ARC_CHECK(low >= 0 && high < classes, metric, ": ", what, " hold labels from ", low, " to ", high, ", but the task ",
            "has ", classes, " classes (0 to ", classes - 1, "); set num_classes (or task) to match");
}

// One-hot rows (N, C) of the classes each sample is predicted as (its top_k), and of its target.
std::pair<torch::Tensor, torch::Tensor> one_hot_pairs(const std::string& metric, const ClassificationOptions& options,
                                                      const torch::Tensor& preds, const torch::Tensor& target) {
  const int64_t classes = options.classes();
  if (options.task() == "binary") {
    ARC_CHECK(preds.sizes() == target.sizes(), metric, ": binary preds and target must have one shape, but got ",
              preds.sizes(), " and ", target.sizes());
    const auto predicted = binary_predictions(preds, options.threshold()).reshape({-1});
    check_labels(metric, predicted, 2, "preds");
    check_labels(metric, target, 2, "target");
    // Class 1 alone: binary scores count the positive class.
    return {predicted.to(torch::kBool).unsqueeze(1), target.reshape({-1}).to(torch::kBool).unsqueeze(1)};
  }
  ARC_CHECK(target.dim() == 1, metric, ": multiclass target must be (N) labels, but got shape ", target.sizes());
  check_labels(metric, target, classes, "target");
  const int64_t n = target.size(0);
  auto predicted = torch::zeros({n, classes}, torch::kBool);
  if (preds.is_floating_point()) {
    ARC_CHECK(preds.dim() == 2 && preds.size(0) == n && preds.size(1) == classes, metric, ": multiclass scores must ",
              "be (N, num_classes) = (", n, ", ", classes, "), but got shape ", preds.sizes());
    predicted.scatter_(1, std::get<1>(preds.topk(options.top_k(), 1)), true);
  } else {
    ARC_CHECK(options.top_k() == 1, metric, ": top_k ", options.top_k(), " needs scores of shape (N, num_classes), ",
              "but preds are labels; pass the scores");
    ARC_CHECK(preds.sizes() == target.sizes(), metric, ": multiclass label preds must be (N) as target, but got ",
              preds.sizes(), " and ", target.sizes());
    check_labels(metric, preds, classes, "preds");
    predicted.scatter_(1, preds.to(torch::kLong).unsqueeze(1), true);
  }
  auto actual = torch::zeros({n, classes}, torch::kBool);
  actual.scatter_(1, target.to(torch::kLong).unsqueeze(1), true);
  return {predicted, actual};
}

// a / b, 0 where b is.
torch::Tensor safe_divide(const torch::Tensor& a, const torch::Tensor& b) {
  const auto numerator = a.to(torch::kDouble), denominator = b.to(torch::kDouble);
  return torch::where(denominator == 0, torch::zeros_like(numerator), numerator / denominator);
}

}  // namespace

void ClassificationOptions::validate(const std::string& metric) const {
  check_choice(metric + " task", task_, {"binary", "multiclass"});
  check_choice(metric + " average", average_, {"micro", "macro", "none"});
  check_choice(metric + " normalize", normalize_, {"none", "true", "pred", "all"});
  ARC_CHECK(task_ == "binary" || num_classes_ >= 2, metric, ": a multiclass task needs num_classes >= 2, got ",
            num_classes_, "; set num_classes");
  ARC_CHECK(top_k_ >= 1 && top_k_ <= classes() && (task_ == "multiclass" || top_k_ == 1), metric, ": top_k must ",
            "be from 1 to num_classes (1 for binary), got ", top_k_);
}

StatScores::StatScores(ClassificationOptions options, const std::string& metric) : options_(std::move(options)) {
  options_.validate(metric);
  const int64_t columns = options_.task() == "binary" ? 1 : options_.num_classes();
  tp_ = add_state("tp", torch::zeros({columns}, torch::kLong), StateReduce::sum);
  fp_ = add_state("fp", torch::zeros({columns}, torch::kLong), StateReduce::sum);
  tn_ = add_state("tn", torch::zeros({columns}, torch::kLong), StateReduce::sum);
  fn_ = add_state("fn", torch::zeros({columns}, torch::kLong), StateReduce::sum);
}

void StatScores::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    const auto [predicted, actual] = one_hot_pairs(name(), options_, preds.detach().cpu(), target.detach().cpu());
    state(tp_) += (predicted & actual).sum(0);
    state(fp_) += (predicted & ~actual).sum(0);
    state(tn_) += (~predicted & ~actual).sum(0);
    state(fn_) += (~predicted & actual).sum(0);
  });
}

torch::Tensor StatScores::reduce(const torch::Tensor& numerator, const torch::Tensor& denominator,
                                 const torch::Tensor& tp, const torch::Tensor& fp, const torch::Tensor& fn) const {
  if (options_.task() == "binary" || options_.average() == "micro")
    return safe_divide(numerator.sum(), denominator.sum());
  const auto scores = safe_divide(numerator, denominator);
  if (options_.average() == "none") return scores;
  const auto present = ((tp + fp + fn) > 0).to(torch::kDouble);
  return safe_divide((scores * present).sum(), present.sum());
}

torch::Tensor Accuracy::compute_from(const std::vector<torch::Tensor>& s) const {
  if (options_.task() == "binary") return safe_divide(s[tp_] + s[tn_], s[tp_] + s[tn_] + s[fp_] + s[fn_]).squeeze();
  return reduce(s[tp_], s[tp_] + s[fn_], s[tp_], s[fp_], s[fn_]);
}

torch::Tensor Precision::compute_from(const std::vector<torch::Tensor>& s) const {
  return reduce(s[tp_], s[tp_] + s[fp_], s[tp_], s[fp_], s[fn_]);
}

torch::Tensor Recall::compute_from(const std::vector<torch::Tensor>& s) const {
  return reduce(s[tp_], s[tp_] + s[fn_], s[tp_], s[fp_], s[fn_]);
}

torch::Tensor F1Score::compute_from(const std::vector<torch::Tensor>& s) const {
  return reduce(2 * s[tp_], 2 * s[tp_] + s[fp_] + s[fn_], s[tp_], s[fp_], s[fn_]);
}

ConfusionMatrix::ConfusionMatrix(ClassificationOptions options) : options_(std::move(options)) {
  options_.validate("ConfusionMatrix");
  const int64_t classes = options_.classes();
  matrix_ = add_state("matrix", torch::zeros({classes, classes}, torch::kLong), StateReduce::sum);
}

void ConfusionMatrix::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    const int64_t classes = options_.classes();
    torch::Tensor predicted, actual;
    if (options_.task() == "binary") {
      predicted = binary_predictions(preds.detach().cpu(), options_.threshold()).reshape({-1});
      actual = target.detach().cpu().reshape({-1}).to(torch::kLong);
      ARC_CHECK(preds.numel() == target.numel(),
                "ConfusionMatrix: binary preds and target must have one shape, but got ", preds.sizes(), " and ",
                target.sizes());
    } else {
      const auto options = ClassificationOptions(options_).top_k(1);
      const auto pairs = one_hot_pairs(name(), options, preds.detach().cpu(), target.detach().cpu());
      predicted = pairs.first.to(torch::kLong).argmax(1);
      actual = pairs.second.to(torch::kLong).argmax(1);
    }
    check_labels(name(), predicted, classes, "preds");
    check_labels(name(), actual, classes, "target");
    state(matrix_) += torch::bincount(actual * classes + predicted, {}, classes * classes).view({classes, classes});
  });
}

torch::Tensor ConfusionMatrix::compute_from(const std::vector<torch::Tensor>& s) const {
  const auto& matrix = s[matrix_];
  const auto& normalize = options_.normalize();
  if (normalize == "none") return matrix;
  if (normalize == "all") return safe_divide(matrix, matrix.sum());
  return safe_divide(matrix, matrix.sum(normalize == "true" ? 1 : 0, /*keepdim=*/true));
}

RankingMetric::RankingMetric(ClassificationOptions options, const std::string& metric) : options_(std::move(options)) {
  options_.validate(metric);
  ARC_CHECK(options_.average() != "micro" || options_.task() == "binary", metric, ": average \"micro\" is not ",
            "defined for a multiclass ", metric, "; use \"macro\" or \"none\"");
  const bool binary = options_.task() == "binary";
  preds_ = add_state(
      "preds", binary ? torch::zeros({0}, torch::kDouble) : torch::zeros({0, options_.num_classes()}, torch::kDouble),
      StateReduce::cat);
  target_ = add_state("target", torch::zeros({0}, torch::kLong), StateReduce::cat);
}

void RankingMetric::update(const torch::Tensor& preds, const torch::Tensor& target) {
  add_batch([&] {
    auto scores = preds.detach().cpu().to(torch::kDouble);
    const auto labels = target.detach().cpu().reshape({-1});
    if (options_.task() == "binary") {
      ARC_CHECK(preds.numel() == target.numel(), name(), ": binary preds and target must have one shape, but got ",
                preds.sizes(), " and ", target.sizes());
      scores = scores.reshape({-1});
      check_labels(name(), labels, 2, "target");
      if (((scores < 0) | (scores > 1)).any().item<bool>()) scores = torch::sigmoid(scores);
    } else {
      ARC_CHECK(scores.dim() == 2 && scores.size(0) == labels.size(0) && scores.size(1) == options_.num_classes(),
                name(), ": multiclass scores must be (N, num_classes) = (", labels.size(0), ", ",
                options_.num_classes(), "), but got shape ", preds.sizes());
      check_labels(name(), labels, options_.num_classes(), "target");
      if (((scores < 0) | (scores > 1)).any().item<bool>()) scores = torch::softmax(scores, 1);
    }
    append(preds_, scores);
    append(target_, labels);
  });
}

torch::Tensor RankingMetric::one_vs_rest(const std::vector<torch::Tensor>& s,
                                         double (*score)(const torch::Tensor&, const torch::Tensor&)) const {
  const auto& scores = s[preds_];
  const auto& target = s[target_];
  if (options_.task() == "binary") return torch::scalar_tensor(score(scores, target == 1), torch::kDouble);
  const int64_t classes = options_.num_classes();
  auto each = torch::empty({classes}, torch::kDouble);
  auto present = torch::zeros({classes}, torch::kDouble);
  for (int64_t c = 0; c < classes; ++c) {
    const auto positives = target == c;
    each[c] = score(scores.select(1, c), positives);
    present[c] = positives.any().item<bool>() ? 1.0 : 0.0;
  }
  if (options_.average() == "none") return each;
  return safe_divide((torch::nan_to_num(each) * present).sum(), present.sum());
}

namespace {

// True and false positives at each distinct score, highest first (ties counted together).
std::pair<torch::Tensor, torch::Tensor> counts_at_thresholds(const torch::Tensor& scores,
                                                             const torch::Tensor& positives) {
  const auto [sorted, order] = torch::sort(scores, /*stable=*/true, /*dim=*/0, /*descending=*/true);
  const auto hits = positives.index_select(0, order).to(torch::kDouble);
  const int64_t n = sorted.size(0);
  auto last = torch::cat({sorted.narrow(0, 1, n - 1) != sorted.narrow(0, 0, n - 1), torch::ones({1}, torch::kBool)});
  const auto ends = last.nonzero().reshape({-1});
  const auto tps = hits.cumsum(0).index_select(0, ends);
  return {tps, (ends + 1).to(torch::kDouble) - tps};
}

double roc_area(const torch::Tensor& scores, const torch::Tensor& positives) {
  if (scores.numel() == 0) return 0.0;
  const auto [tps, fps] = counts_at_thresholds(scores, positives);
  const double p = tps[-1].item<double>(), n = fps[-1].item<double>();
  if (p == 0 || n == 0) return 0.0;
  const auto zero = torch::zeros({1}, torch::kDouble);
  const auto tpr = torch::cat({zero, tps / p}), fpr = torch::cat({zero, fps / n});
  const int64_t k = tpr.size(0);
  const auto widths = fpr.narrow(0, 1, k - 1) - fpr.narrow(0, 0, k - 1);
  return (widths * (tpr.narrow(0, 1, k - 1) + tpr.narrow(0, 0, k - 1)) / 2).sum().item<double>();
}

double average_precision(const torch::Tensor& scores, const torch::Tensor& positives) {
  if (scores.numel() == 0) return std::nan("");
  const auto [tps, fps] = counts_at_thresholds(scores, positives);
  const double p = tps[-1].item<double>();
  if (p == 0) return std::nan("");
  const auto recall = torch::cat({torch::zeros({1}, torch::kDouble), tps / p});
  const auto precision = tps / (tps + fps);
  const int64_t k = recall.size(0);
  return ((recall.narrow(0, 1, k - 1) - recall.narrow(0, 0, k - 1)) * precision).sum().item<double>();
}

}  // namespace

AUROC::AUROC(ClassificationOptions options) : RankingMetric(std::move(options), "AUROC") {}

torch::Tensor AUROC::compute_from(const std::vector<torch::Tensor>& states) const {
  return one_vs_rest(states, roc_area);
}

AveragePrecision::AveragePrecision(ClassificationOptions options)
    : RankingMetric(std::move(options), "AveragePrecision") {}

torch::Tensor AveragePrecision::compute_from(const std::vector<torch::Tensor>& states) const {
  return one_vs_rest(states, average_precision);
}

}  // namespace arc::metrics
