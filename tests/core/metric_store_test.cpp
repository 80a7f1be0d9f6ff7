#include <arc/base/error.h>
#include <arc/core/metric_store.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace arc {
namespace {

torch::Tensor v(double x) { return torch::scalar_tensor(x, torch::kDouble); }

TEST(MetricStore, EpochMeanIsWeightedByBatchSize) {
  MetricStore store;
  store.log("val_loss", v(1.0), {}, false, 10);
  store.log("val_loss", v(4.0), {}, false, 30);
  const auto epoch = store.end_epoch();
  EXPECT_DOUBLE_EQ(epoch.at("val_loss"), (1.0 * 10 + 4.0 * 30) / 40);
  EXPECT_DOUBLE_EQ(store.callback_metrics().at("val_loss"), 3.25);
}

TEST(MetricStore, SumMaxMinReductions) {
  MetricStore store;
  for (double x : {3.0, -1.0, 5.0}) {
    store.log("s", v(x), LogOptions().on_epoch(true).reduce(Reduce::sum), false, 2);
    store.log("hi", v(x), LogOptions().on_epoch(true).reduce(Reduce::max), false, 2);
    store.log("lo", v(x), LogOptions().on_epoch(true).reduce(Reduce::min), false, 2);
  }
  const auto epoch = store.end_epoch();
  EXPECT_DOUBLE_EQ(epoch.at("s"), 7.0);
  EXPECT_DOUBLE_EQ(epoch.at("hi"), 5.0);
  EXPECT_DOUBLE_EQ(epoch.at("lo"), -1.0);
}

// Two ranks' stores: each gathers its own values and the other's, which `other` packed when it synced.
TEST(MetricStore, RanksThatSyncOtherNamesFailInsteadOfMixingValues) {
  const auto synced = [](const std::string& name, double value, std::vector<double>* packed = nullptr,
                         const std::vector<double>& other = {}) {
    MetricStore store;
    store.log(name, v(value), LogOptions().on_step(true).sync_dist(true), true, 1);
    store.sync_step_values([&](const std::vector<double>& mine) {
      if (packed != nullptr) *packed = mine;
      return std::vector<std::vector<double>>{mine, other.empty() ? mine : other};
    });
    return store.step_logger_metrics();
  };
  std::vector<double> rank1_loss, rank1_renamed;
  synced("loss", 3.0, &rank1_loss);
  synced("loss_rank1", 3.0, &rank1_renamed);
  EXPECT_DOUBLE_EQ(synced("loss", 1.0, nullptr, rank1_loss).at("loss"), 2.0);
  try {
    synced("loss_rank0", 1.0, nullptr, rank1_renamed);
    FAIL() << "values of other names were mixed";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "the values logged with sync_dist=True have other names on rank 1 than here (loss_rank0); every rank "
                 "must sync the same names: log a value whose name differs by rank without sync_dist");
  }
}

// Two ranks whose values are equal: a sum doubles when synced. A value synced once is not synced again
// at a later sync where it was not logged anew (it would double again), and one logged anew is.
TEST(MetricStore, AStepValueIsSyncedOnceEachTimeItIsLogged) {
  int64_t gathers = 0;
  const GatherFn two_alike = [&](const std::vector<double>& mine) {
    ++gathers;
    return std::vector<std::vector<double>>{mine, mine};
  };
  MetricStore store;
  store.log("count", v(3.0), LogOptions().on_step(true).reduce(Reduce::sum).sync_dist(true), true, 1);
  store.sync_step_values(two_alike);
  EXPECT_DOUBLE_EQ(store.callback_metrics().at("count"), 6.0);
  store.sync_step_values(two_alike);
  EXPECT_DOUBLE_EQ(store.step_logger_metrics().at("count"), 6.0);
  EXPECT_EQ(gathers, 1);  // nothing new to sync: no collective
  store.log("count", v(4.0), LogOptions().on_step(true).reduce(Reduce::sum).sync_dist(true), true, 1);
  store.sync_step_values(two_alike);
  EXPECT_DOUBLE_EQ(store.step_logger_metrics().at("count"), 8.0);
  EXPECT_EQ(gathers, 2);
}

TEST(MetricStore, StepAndEpochGetLightningSuffixes) {
  MetricStore store;
  store.log("loss", v(2.0), LogOptions().on_step(true).on_epoch(true), true, 1);
  store.log("loss", v(4.0), LogOptions().on_step(true).on_epoch(true), true, 1);
  EXPECT_DOUBLE_EQ(store.step_logger_metrics().at("loss_step"), 4.0);
  const auto epoch = store.end_epoch();
  EXPECT_DOUBLE_EQ(epoch.at("loss_epoch"), 3.0);
  const auto callback = store.callback_metrics();
  EXPECT_DOUBLE_EQ(callback.at("loss_step"), 4.0);
  EXPECT_DOUBLE_EQ(callback.at("loss_epoch"), 3.0);
  EXPECT_DOUBLE_EQ(callback.at("loss"), 3.0);
}

TEST(MetricStore, TrainingDefaultsToStepAndEvaluationToEpoch) {
  MetricStore store;
  store.log("train_loss", v(1.0), {}, true, 1);
  EXPECT_EQ(store.step_logger_metrics().count("train_loss"), 1u);
  EXPECT_TRUE(store.end_epoch().empty());
  MetricStore eval;
  eval.log("val_loss", v(1.0), {}, false, 1);
  EXPECT_TRUE(eval.step_logger_metrics().empty());
  EXPECT_EQ(eval.end_epoch().count("val_loss"), 1u);
}

TEST(MetricStore, ProgressBarShowsOnlyMarkedValues) {
  MetricStore store;
  store.log("a", v(1.0), LogOptions().prog_bar(true), true, 1);
  store.log("b", v(2.0), {}, true, 1);
  const auto bar = store.prog_bar_metrics();
  EXPECT_EQ(bar.size(), 1u);
  EXPECT_DOUBLE_EQ(bar.at("a"), 1.0);
}

TEST(MetricStore, NonScalarValueIsAnError) {
  MetricStore store;
  EXPECT_THROW(store.log("x", torch::ones({2}), {}, true, 1), Error);
}

}  // namespace
}  // namespace arc
