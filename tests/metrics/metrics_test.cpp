// arc::metrics against scikit-learn on the same predictions, and across two ranks with uneven
// shares against one process over all the data.
#include <arc/core/metric_store.h>
#include <arc/core/trainer.h>
#include <arc/data/dataset.h>
#include <arc/metrics/aggregation.h>
#include <arc/metrics/classification.h>
#include <arc/metrics/regression.h>
#include <support/errors.h>
#include <support/python.h>
#include <support/scratch.h>
#include <support/thread_ranks.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace arc::metrics {
namespace {

constexpr int64_t kSamples = 100, kClasses = 4;

// The predictions every case scores, made once: multiclass logits and labels (every class
// present), binary probabilities in steps of 0.1 (ties and values at the threshold), regression
// values, and weights.
struct Data {
  torch::Tensor scores, labels, probabilities, binary, predicted, observed, weights;
  Data() {
    torch::manual_seed(7);
    scores = torch::randn({kSamples, kClasses});
    labels = torch::cat({torch::arange(kClasses), torch::randint(kClasses, {kSamples - kClasses})});
    probabilities = torch::round(torch::rand({kSamples}) * 10) / 10;
    binary = torch::cat({torch::tensor({0, 1}), torch::randint(2, {kSamples - 2})});
    predicted = torch::randn({kSamples});
    observed = predicted * 0.8 + 0.3 * torch::randn({kSamples});
    weights = torch::rand({kSamples}) + 0.5;
  }
};
const Data& data() {
  static const Data made;
  return made;
}

ClassificationOptions multiclass(const std::string& average, int64_t top_k = 1) {
  return ClassificationOptions().num_classes(kClasses).average(average).top_k(top_k);
}
ClassificationOptions binary() { return ClassificationOptions().task("binary"); }

// One case: a metric made fresh, the rows [begin, end) of the data added to it, and sklearn's
// expression for its value (numpy arrays s, y, p, b, yhat, yt, w over every sample).
struct Case {
  std::string name;
  std::function<std::shared_ptr<Metric>()> make;
  std::function<void(Metric&, int64_t, int64_t)> add;
  std::string sklearn;
};

template <typename M, typename... Options>
std::function<std::shared_ptr<Metric>()> made(Options... options) {
  return [=] { return std::make_shared<M>(options...); };
}

template <typename M>
std::function<void(Metric&, int64_t, int64_t)> with(torch::Tensor Data::*preds, torch::Tensor Data::*target) {
  return [=](Metric& metric, int64_t begin, int64_t end) {
    dynamic_cast<M&>(metric).update((data().*preds).slice(0, begin, end), (data().*target).slice(0, begin, end));
  };
}

template <typename M>
std::function<void(Metric&, int64_t, int64_t)> values() {
  return [](Metric& metric, int64_t begin, int64_t end) {
    dynamic_cast<M&>(metric).update(data().predicted.slice(0, begin, end));
  };
}

const std::vector<Case>& cases() {
  using D = Data;
  static const std::vector<Case> all = {
      {"accuracy_micro", made<Accuracy>(multiclass("micro")), with<Accuracy>(&D::scores, &D::labels),
       "accuracy_score(y, yhat)"},
      {"accuracy_macro", made<Accuracy>(multiclass("macro")), with<Accuracy>(&D::scores, &D::labels),
       "recall_score(y, yhat, average='macro', labels=L, zero_division=0)"},
      {"accuracy_top2", made<Accuracy>(multiclass("micro", 2)), with<Accuracy>(&D::scores, &D::labels),
       "top_k_accuracy_score(y, s, k=2, labels=L)"},
      {"accuracy_binary", made<Accuracy>(binary()), with<Accuracy>(&D::probabilities, &D::binary),
       "accuracy_score(b, p >= 0.5)"},
      {"precision_micro", made<Precision>(multiclass("micro")), with<Precision>(&D::scores, &D::labels),
       "precision_score(y, yhat, average='micro', labels=L, zero_division=0)"},
      {"precision_macro", made<Precision>(multiclass("macro")), with<Precision>(&D::scores, &D::labels),
       "precision_score(y, yhat, average='macro', labels=L, zero_division=0)"},
      {"precision_binary", made<Precision>(binary()), with<Precision>(&D::probabilities, &D::binary),
       "precision_score(b, p >= 0.5)"},
      {"recall_macro", made<Recall>(multiclass("macro")), with<Recall>(&D::scores, &D::labels),
       "recall_score(y, yhat, average='macro', labels=L, zero_division=0)"},
      {"recall_binary", made<Recall>(binary()), with<Recall>(&D::probabilities, &D::binary),
       "recall_score(b, p >= 0.5)"},
      {"f1_micro", made<F1Score>(multiclass("micro")), with<F1Score>(&D::scores, &D::labels),
       "f1_score(y, yhat, average='micro', labels=L, zero_division=0)"},
      {"f1_macro", made<F1Score>(multiclass("macro")), with<F1Score>(&D::scores, &D::labels),
       "f1_score(y, yhat, average='macro', labels=L, zero_division=0)"},
      {"f1_none", made<F1Score>(multiclass("none")), with<F1Score>(&D::scores, &D::labels),
       "f1_score(y, yhat, average=None, labels=L, zero_division=0)"},
      {"f1_binary", made<F1Score>(binary()), with<F1Score>(&D::probabilities, &D::binary), "f1_score(b, p >= 0.5)"},
      {"confusion_multiclass", made<ConfusionMatrix>(multiclass("micro")),
       with<ConfusionMatrix>(&D::scores, &D::labels), "confusion_matrix(y, yhat, labels=L)"},
      {"confusion_true", made<ConfusionMatrix>(multiclass("micro").normalize("true")),
       with<ConfusionMatrix>(&D::scores, &D::labels), "confusion_matrix(y, yhat, labels=L, normalize='true')"},
      {"confusion_binary", made<ConfusionMatrix>(binary()), with<ConfusionMatrix>(&D::probabilities, &D::binary),
       "confusion_matrix(b, p >= 0.5, labels=[0, 1])"},
      {"auroc_binary", made<AUROC>(binary()), with<AUROC>(&D::probabilities, &D::binary), "roc_auc_score(b, p)"},
      {"auroc_macro", made<AUROC>(multiclass("macro")), with<AUROC>(&D::scores, &D::labels),
       "roc_auc_score(y, softmax(s, axis=1), multi_class='ovr', average='macro', labels=L)"},
      {"auroc_none", made<AUROC>(multiclass("none")), with<AUROC>(&D::scores, &D::labels),
       "roc_auc_score(label_binarize(y, classes=L), softmax(s, axis=1), average=None)"},
      {"ap_binary", made<AveragePrecision>(binary()), with<AveragePrecision>(&D::probabilities, &D::binary),
       "average_precision_score(b, p)"},
      {"ap_macro", made<AveragePrecision>(multiclass("macro")), with<AveragePrecision>(&D::scores, &D::labels),
       "average_precision_score(label_binarize(y, classes=L), softmax(s, axis=1), average='macro')"},
      {"mse", made<MeanSquaredError>(), with<MeanSquaredError>(&D::predicted, &D::observed),
       "mean_squared_error(yt, yp)"},
      {"rmse", made<MeanSquaredError>(false), with<MeanSquaredError>(&D::predicted, &D::observed),
       "mean_squared_error(yt, yp, squared=False)"},
      {"mae", made<MeanAbsoluteError>(), with<MeanAbsoluteError>(&D::predicted, &D::observed),
       "mean_absolute_error(yt, yp)"},
      {"r2", made<R2Score>(), with<R2Score>(&D::predicted, &D::observed), "r2_score(yt, yp)"},
      {"mean_weighted", made<MeanMetric>(), with<MeanMetric>(&D::predicted, &D::weights), "np.average(yp, weights=w)"},
      {"sum", made<SumMetric>(), values<SumMetric>(), "np.sum(yp)"},
      {"max", made<MaxMetric>(), values<MaxMetric>(), "np.max(yp)"},
      {"min", made<MinMetric>(), values<MinMetric>(), "np.min(yp)"},
      {"cat", made<CatMetric>(), values<CatMetric>(), "yp"},
  };
  return all;
}

// Each case over all the data, added in three uneven batches.
torch::Tensor computed(const Case& c) {
  auto metric = c.make();
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 13}, {13, 64}, {64, kSamples}})
    c.add(*metric, begin, end);
  return metric->compute();
}

void write_rows(std::ofstream& out, const std::string& name, const torch::Tensor& tensor) {
  const auto values = tensor.to(torch::kDouble).contiguous().reshape({-1});
  out << name;
  for (int64_t i = 0; i < values.numel(); ++i) out << ' ' << std::setprecision(17) << values[i].item<double>();
  out << '\n';
}

// sklearn's value of every case, by name, from the data written to a file.
std::map<std::string, std::vector<double>> sklearn_values(const std::string& python) {
  const auto folder = testing::fresh_folder("metrics_sklearn");
  std::ofstream data_file(folder + "/data.txt");
  const auto& d = data();
  write_rows(data_file, "s", d.scores);
  write_rows(data_file, "y", d.labels);
  write_rows(data_file, "p", d.probabilities);
  write_rows(data_file, "b", d.binary);
  write_rows(data_file, "yp", d.predicted);
  write_rows(data_file, "yt", d.observed);
  write_rows(data_file, "w", d.weights);
  data_file.close();
  std::ofstream script(folder + "/score.py");
  script << "import numpy as np\nfrom scipy.special import softmax\nfrom sklearn.metrics import *\n"
         << "from sklearn.preprocessing import label_binarize\n"
         << "rows = {l.split()[0]: np.array([float(v) for v in l.split()[1:]]) for l in open('" << folder
         << "/data.txt')}\n"
         << "s = rows['s'].reshape(-1, " << kClasses << "); y = rows['y'].astype(int); p = rows['p']\n"
         << "b = rows['b'].astype(int); yp = rows['yp']; yt = rows['yt']; w = rows['w']\n"
         << "yhat = s.argmax(axis=1); L = list(range(" << kClasses << "))\n";
  for (const auto& c : cases())
    script << "print('" << c.name << "', ' '.join(repr(float(v)) for v in np.ravel(" << c.sklearn << ")))\n";
  script.close();
  FILE* pipe = popen((python + " " + folder + "/score.py 2>&1").c_str(), "r");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  std::map<std::string, std::vector<double>> values;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    for (double v; words >> v;) values[name].push_back(v);
  }
  std::filesystem::remove_all(folder);
  return values;
}

TEST(Metrics, MatchScikitLearnOnTheSamePredictions) {
  const std::string python = "/usr/bin/python3";
  if (!testing::imports(python, "sklearn"))
    GTEST_SKIP() << "/usr/bin/python3 does not import sklearn: install Debian's python3-sklearn "
                    "(scripts/install-deps.sh --tests)";
  const auto expected = sklearn_values(python);
  for (const auto& c : cases()) {
    const auto found = expected.find(c.name);
    ASSERT_NE(found, expected.end()) << c.name << " has no sklearn value";
    const auto mine = computed(c).to(torch::kDouble).reshape({-1});
    ASSERT_EQ(mine.numel(), static_cast<int64_t>(found->second.size())) << c.name;
    for (int64_t i = 0; i < mine.numel(); ++i)
      EXPECT_NEAR(mine[i].item<double>(), found->second[static_cast<size_t>(i)], 1e-6) << c.name << " [" << i << "]";
  }
}

// Rank 0 takes the first 37 samples in two batches, rank 1 the other 63 in one: every rank's
// compute() gives what one process gives over all 100 (concatenations in rank order).
TEST(Metrics, TwoRanksWithUnevenSharesEqualOneProcess) {
  std::vector<torch::Tensor> alone;
  for (const auto& c : cases()) alone.push_back(computed(c));
  testing::on_ranks(2, testing::Group{}, [&](int64_t rank, Collectives& group) {
    for (size_t i = 0; i < cases().size(); ++i) {
      const auto& c = cases()[i];
      auto metric = c.make();
      metric->sync_on(&group);
      if (rank == 0) {
        c.add(*metric, 0, 20);
        c.add(*metric, 20, 37);
      } else {
        c.add(*metric, 37, kSamples);
      }
      const auto value = metric->compute();
      EXPECT_TRUE(torch::allclose(value.to(torch::kDouble), alone[i].to(torch::kDouble), 1e-12, 1e-12))
          << c.name << " rank " << rank << ": " << value << " against " << alone[i];
      // The rank's own states stay: with the group unset, compute() is over its own updates.
      metric->sync_on(nullptr);
      EXPECT_TRUE(metric->updated());
    }
  });
}

TEST(Metrics, ResetStartsOverAndBadInputSaysWhatToDo) {
  Accuracy accuracy(multiclass("micro"));
  accuracy.update(torch::tensor({0, 1}), torch::tensor({0, 0}));
  EXPECT_DOUBLE_EQ(accuracy.compute().item<double>(), 0.5);
  accuracy.reset();
  EXPECT_FALSE(accuracy.updated());
  accuracy.update(torch::tensor({1}), torch::tensor({1}));
  EXPECT_DOUBLE_EQ(accuracy.compute().item<double>(), 1.0);
  EXPECT_NE(testing::error_of([&] {
              accuracy.update(torch::tensor({4}), torch::tensor({1}));
            }).find("Accuracy: preds hold labels from 4 to 4, but the task has 4 classes (0 to 3)"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(accuracy.compute().item<double>(), 1.0);  // the failed update changed nothing
  EXPECT_NE(testing::error_of([] {
              Accuracy without_classes{ClassificationOptions()};
            }).find("Accuracy: a multiclass task needs num_classes >= 2, got 0; set num_classes"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { F1Score(multiclass("weighted")); }).find("unknown F1Score average 'weighted'"),
            std::string::npos);
  MeanMetric strict(AggregationOptions().nan_strategy("error"));
  EXPECT_NE(testing::error_of([&] {
              strict.update(torch::tensor({1.0, std::nan("")}));
            }).find("MeanMetric: a value is NaN, and nan_strategy is \"error\""),
            std::string::npos);
  MeanMetric lenient(AggregationOptions().nan_strategy("ignore"));
  lenient.update(torch::tensor({1.0, std::nan(""), 3.0}));
  EXPECT_DOUBLE_EQ(lenient.compute().item<double>(), 2.0);
}

// A metric logged on_step gives the value of its last update; on_epoch its value over the epoch,
// computed when the epoch ends, after which it starts afresh.
TEST(Metrics, TheStoreLogsABatchsValueAtEachStepAndTheEpochsAtItsEnd) {
  MetricStore store;
  MeanMetric mean;
  for (const auto& batch : {torch::tensor({1.0, 2.0}), torch::tensor({6.0})}) {
    mean.update(batch);
    store.log("m", mean, LogOptions().on_step(true).on_epoch(true), true);
  }
  EXPECT_DOUBLE_EQ(store.step_logger_metrics().at("m_step"), 6.0);
  const auto epoch = store.end_epoch();
  EXPECT_DOUBLE_EQ(epoch.at("m_epoch"), 3.0);
  EXPECT_DOUBLE_EQ(store.callback_metrics().at("m"), 3.0);
  EXPECT_FALSE(mean.updated());
  ConfusionMatrix matrix(binary());
  matrix.update(torch::tensor({1}), torch::tensor({1}));
  EXPECT_NE(testing::error_of([&] {
              store.log("cm", matrix, LogOptions().on_step(true), true);
            }).find("log('cm') logs one value, but ConfusionMatrix computes a tensor of shape [2, 2]"),
            std::string::npos);
}

// Two ranks' stores close the epoch with the metric over both ranks' updates (uneven shares).
TEST(Metrics, TheStoreComputesALoggedMetricOverEveryRank) {
  const auto& c = cases().front();
  const double alone = computed(c).item<double>();
  testing::on_ranks(2, testing::Group{}, [&](int64_t rank, Collectives& group) {
    MetricStore store;
    auto metric = c.make();
    if (rank == 0) c.add(*metric, 0, 37);
    if (rank == 1) c.add(*metric, 37, kSamples);
    store.log("val_acc", *metric, {}, false);
    const auto epoch = store.end_epoch(gather_values(group));
    EXPECT_DOUBLE_EQ(epoch.at("val_acc"), alone) << "rank " << rank;
  });
}

// A module that logs metric objects: the training accuracy per step, the validation accuracy per
// epoch.
class Scored : public TrainModule {
 public:
  Scored() : TrainModule("Scored"), net(register_module("net", torch::nn::Linear(4, 3))) {}
  torch::Tensor training_step(Batch& batch, int64_t) override {
    const auto scores = net(batch[0]);
    train_accuracy.update(scores, batch[1]);
    log("train_acc", train_accuracy);
    step_values.push_back(train_accuracy.batch_value().item<double>());
    return torch::nn::functional::cross_entropy(scores, batch[1]);
  }
  void validation_step(Batch& batch, int64_t) override {
    val_accuracy.update(net(batch[0]), batch[1]);
    log("val_acc", val_accuracy);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1))};
  }
  torch::nn::Linear net;
  Accuracy train_accuracy{multiclass("micro").num_classes(3)};
  Accuracy val_accuracy{multiclass("micro").num_classes(3)};
  std::vector<double> step_values;
};

TEST(Metrics, AModuleLogsMetricObjectsAsLightningDoes) {
  torch::manual_seed(3);
  const auto x = torch::randn({90, 4}), y = x.narrow(1, 0, 3).argmax(1);
  auto data = std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, y});
  Scored module;
  Trainer trainer(TrainerOptions().max_epochs(2).logger(false).enable_checkpointing(false).enable_progress_bar(false));
  trainer.fit(module, {data, DataLoaderOptions(20)}, {{data, DataLoaderOptions(25)}});
  EXPECT_EQ(trainer.callback_metrics().at("train_acc"), module.step_values.back());
  const auto validated = trainer.validate(module, {{data, DataLoaderOptions(25)}}, "", false);
  torch::NoGradGuard no_grad;
  const double direct = (module.net(x).argmax(1) == y).to(torch::kDouble).mean().item<double>();
  EXPECT_DOUBLE_EQ(validated.at("val_acc"), direct);
  EXPECT_FALSE(module.val_accuracy.updated());  // reset at the epoch's end
}

}  // namespace
}  // namespace arc::metrics
