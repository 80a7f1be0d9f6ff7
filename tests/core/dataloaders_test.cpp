// Several validation, test and predict loaders (issue 18, row 5), reload_dataloaders_every_n_epochs,
// and training on a CombinedLoader.
#include "support/errors.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <utility>

namespace arc {
namespace {

using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

// Notes which loader each evaluation step came from, and logs one value that keeps the loaders
// apart and one that merges them.
class PerLoader : public TinyModule {
 public:
  // TinyModule's two-argument steps stay visible beside these (GCC 13's -Woverloaded-virtual).
  using TinyModule::predict_step;
  using TinyModule::test_step;
  using TinyModule::validation_step;

  void validation_step(Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override {
    steps.emplace_back(dataloader_idx, batch_idx);
    hook_indices.push_back(trainer().dataloader_idx());
    const auto loss = torch::mse_loss(linear(batch[0]), batch[1]);
    log("val_loss", loss);
    log("val_all", loss, LogOptions().add_dataloader_idx(false));
    log("val_both", loss, LogOptions().on_step(true).on_epoch(true));
  }
  void test_step(Batch& batch, int64_t batch_idx, int64_t dataloader_idx) override {
    steps.emplace_back(dataloader_idx, batch_idx);
    log("test_loss", torch::mse_loss(linear(batch[0]), batch[1]));
  }
  torch::Tensor predict_step(Batch& batch, int64_t, int64_t dataloader_idx) override {
    return torch::full({batch.batch_size()}, static_cast<double>(dataloader_idx));
  }

  std::vector<std::pair<int64_t, int64_t>> steps;
  std::vector<int64_t> hook_indices;
};

using Steps = std::vector<std::pair<int64_t, int64_t>>;

// As Lightning: each loader's steps get its index, its metrics "/dataloader_idx_N" after the fork,
// the stage's hooks run once; add_dataloader_idx=false merges the loaders into one mean.
TEST(SeveralDataloaders, ValidationKeepsEachLoadersMetricsApart) {
  PerLoader module;
  Trainer trainer(quiet());
  const auto a = tiny_data(6, 2), b = tiny_data(4, 4);
  const auto metrics = trainer.validate(module, {a, b});
  EXPECT_EQ(module.steps, (Steps{{0, 0}, {0, 1}, {0, 2}, {1, 0}}));
  EXPECT_EQ(module.hook_indices, (std::vector<int64_t>{0, 0, 0, 1}));
  for (const char* name : {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1", "val_all",
                           "val_both_epoch/dataloader_idx_0", "val_both_epoch/dataloader_idx_1"})
    EXPECT_EQ(metrics.count(name), 1u) << name;
  EXPECT_EQ(metrics.count("val_loss"), 0u);
  // Each loader's value is what validating on it alone gives; the merged one weighs every sample.
  const double on_a = Trainer(quiet()).validate(module, a).at("val_loss");
  const double on_b = Trainer(quiet()).validate(module, b).at("val_loss");
  EXPECT_DOUBLE_EQ(metrics.at("val_loss/dataloader_idx_0"), on_a);
  EXPECT_DOUBLE_EQ(metrics.at("val_loss/dataloader_idx_1"), on_b);
  EXPECT_NEAR(metrics.at("val_all"), (on_a * 6 + on_b * 4) / 10, 1e-6);
  EXPECT_EQ(trainer.num_val_batches(), 4);
}

TEST(SeveralDataloaders, FitValidatesOnEveryLoaderAndTheCallbacksSeeTheirMetrics) {
  PerLoader module;
  Trainer trainer(quiet().max_epochs(2).num_sanity_val_steps(2));
  trainer.fit(module, tiny_data(8, 4), {tiny_data(6, 2), tiny_data(4, 4)});
  // The sanity check: 2 batches of the first loader, its 1 of the second; then 3 + 1 per epoch.
  EXPECT_EQ(module.steps.size(), 3u + 2 * 4);
  EXPECT_EQ(module.steps[2], std::make_pair(int64_t{1}, int64_t{0}));
  const auto& metrics = trainer.callback_metrics();
  EXPECT_EQ(metrics.count("val_loss/dataloader_idx_0"), 1u);
  EXPECT_EQ(metrics.count("val_loss/dataloader_idx_1"), 1u);
}

struct TwoLoaders : DataModule {
  DataSources test_dataloaders() override { return {tiny_data(4, 2), tiny_data(3, 3)}; }
  DataSources predict_dataloaders() override { return {tiny_data(4, 2), tiny_data(3, 3)}; }
};

// Records the loader index the writer is given with each batch.
class IndexWriter : public BasePredictionWriter {
 public:
  IndexWriter() : BasePredictionWriter(WriteInterval::batch) {}
  std::string state_key() const override { return "IndexWriter"; }
  void write_on_batch_end(Trainer&, TrainModule&, const torch::Tensor&, const std::vector<int64_t>& indices,
                          const Batch&, int64_t batch_idx, int64_t dataloader_idx) override {
    written.push_back({dataloader_idx, batch_idx, indices.front()});
  }
  std::vector<std::vector<int64_t>> written;
};

TEST(SeveralDataloaders, TestAndPredictTakeADataModulesLoaders) {
  PerLoader module;
  TwoLoaders data;
  auto writer = std::make_shared<IndexWriter>();
  Trainer trainer(quiet(), {writer});
  const auto metrics = trainer.test(module, data);
  EXPECT_EQ(module.steps, (Steps{{0, 0}, {0, 1}, {1, 0}}));
  EXPECT_EQ(metrics.count("test_loss/dataloader_idx_1"), 1u);
  const auto outputs = trainer.predict(module, data);
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[1][0].item<double>(), 0.0);
  EXPECT_EQ(outputs[2][0].item<double>(), 1.0);
  EXPECT_EQ(writer->written, (std::vector<std::vector<int64_t>>{{0, 0, 0}, {0, 1, 2}, {1, 0, 0}}));
  // One loader, as before: no suffix.
  EXPECT_EQ(Trainer(quiet()).test(module, tiny_data(4, 2)).count("test_loss"), 1u);
}

TEST(SeveralDataloaders, AnEmptySourceInTheListIsAnError) {
  try {
    DataSources sources{tiny_data(4, 2), DataSource()};
    FAIL() << "an empty source was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("data source 1 of 2 has no dataset"), std::string::npos) << error.what();
  }
}

// Steps on a CombinedLoader's parts "a" and, where there is one, "b"; notes each part's batch size.
class TwoSources : public TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t) override {
    const bool has_b = batch.has_part("b");
    sizes.emplace_back(batch.part("a").batch_size(), has_b ? batch.part("b").batch_size() : 0);
    auto loss = torch::mse_loss(linear(batch.part("a")[0]), batch.part("a")[1]);
    if (has_b) loss = loss + torch::mse_loss(linear(batch.part("b")[0]), batch.part("b")[1]);
    return loss;
  }
  Steps sizes;
};

// "a": 10 samples in batches of 4 (3 batches), "b": 4 samples in batches of 2 (2 batches). Each mode
// gives its epochs' batches to training_step; one source alone trains as that source does without
// CombinedLoader; evaluation and scale_batch_size say what to pass instead.
TEST(CombinedLoader, FitStepsOnEachSourcesPartAndTheOtherStagesTakeAList) {
  const std::map<std::string, Steps> expected{{"max_size_cycle", {{4, 2}, {4, 2}, {2, 2}}},
                                              {"min_size", {{4, 2}, {4, 2}}},
                                              {"max_size", {{4, 2}, {4, 2}, {2, 0}}}};
  for (const auto& [mode, sizes] : expected) {
    TwoSources module;
    Trainer trainer(quiet().max_epochs(2));
    trainer.fit(module, CombinedLoader({{"a", tiny_data(10, 4)}, {"b", tiny_data(4, 2)}}, mode));
    Steps both_epochs = sizes;
    both_epochs.insert(both_epochs.end(), sizes.begin(), sizes.end());
    EXPECT_EQ(module.sizes, both_epochs) << mode;
    EXPECT_EQ(trainer.num_training_batches(), static_cast<int64_t>(sizes.size())) << mode;
  }
  torch::manual_seed(0);
  TwoSources combined;
  torch::manual_seed(0);
  TinyModule alone;
  Trainer(quiet().max_epochs(2)).fit(combined, CombinedLoader({{"a", tiny_data(10, 4)}}));
  Trainer(quiet().max_epochs(2)).fit(alone, tiny_data(10, 4));
  EXPECT_TRUE(torch::equal(testing::weights_of(combined), testing::weights_of(alone)));

  const DataSource sources = CombinedLoader({{"a", tiny_data(10, 4)}, {"b", tiny_data(4, 2)}});
  EXPECT_NE(testing::error_of([&] {
              Trainer(quiet()).validate(combined, sources);
            }).find("the val data is a CombinedLoader, which is for training; pass the val sources as a list"),
            std::string::npos);
  Trainer tuning(quiet());
  EXPECT_NE(testing::error_of([&] {
              Tuner(tuning).scale_batch_size(combined, sources);
            }).find("scale_batch_size changes one source's batch size, but the training data is a CombinedLoader"),
            std::string::npos);
}

// overfit_batches trains on the first batches of every source in their order, each source's shuffle
// set aside, as with one source.
TEST(CombinedLoader, OverfitBatchesTakesEachSourcesFirstBatchesUnshuffled) {
  struct FirstRows : TwoSources {
    torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
      firsts.push_back({batch.part("a")[0][0][0].item<float>(), batch.part("b")[0][0][0].item<float>()});
      return TwoSources::training_step(batch, batch_idx);
    }
    std::vector<std::pair<float, float>> firsts;
  } module;
  auto a = tiny_data(10, 2), b = tiny_data(8, 2);
  a.options.shuffle(true);
  b.options.shuffle(true);
  Trainer(quiet().max_epochs(2).seed(5).overfit_batches(BatchAmount::count(2)))
      .fit(module, CombinedLoader({{"a", a}, {"b", b}}));
  // Row i's first feature is i / n: rows 0 and 2 start the first two batches of each source.
  const std::vector<std::pair<float, float>> expected{{0.0f, 0.0f}, {0.2f, 0.25f}, {0.0f, 0.0f}, {0.2f, 0.25f}};
  EXPECT_EQ(module.firsts, expected);
}

// The n-th call of each hook gives data that starts at n, so the module sees which one it trains on.
struct Reloading : DataModule {
  DataSource train_dataloader() override { return shifted(train_calls++); }
  DataSource val_dataloader() override {
    ++val_calls;
    return tiny_data(4, 2);
  }
  static DataSource shifted(int64_t by) {
    auto x = torch::full({4, 4}, static_cast<double>(by));
    return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, x.sum(1, true)}), DataLoaderOptions(2)};
  }
  int64_t train_calls = 0, val_calls = 0;
};

TEST(SeveralDataloaders, ReloadDataloadersEveryNEpochsAsksTheHooksAgain) {
  TinyModule module;
  Reloading data;
  Trainer trainer(quiet().max_epochs(5).reload_dataloaders_every_n_epochs(2));
  trainer.fit(module, data);
  // Loaded for epoch 0, again at epochs 2 and 4, as Lightning's; validation when 2 epochs passed.
  EXPECT_EQ(data.train_calls, 3);
  EXPECT_EQ(data.val_calls, 3);
  EXPECT_EQ(module.seen_first_values, (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));  // two batches per epoch
  TinyModule again;
  Reloading once;
  Trainer(quiet().max_epochs(3)).fit(again, once);
  EXPECT_EQ(once.train_calls, 1);
  EXPECT_EQ(once.val_calls, 1);
  EXPECT_THROW(TrainerOptions::from_json({{"reload_dataloaders_every_n_epochs", -1}}), Error);
}

}  // namespace
}  // namespace arc
