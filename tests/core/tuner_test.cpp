// The Tuner (issue 18, row 2): lr_find, the learning-rate range test, and scale_batch_size; and
// LearningRateFinder and BatchSizeFinder, the two as callbacks at fit start.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace arc {
namespace {

using testing::weights_of;

// Regression on one batch of 256 samples, so that the loss is a function of the weights alone:
// small rates barely move it, large ones make SGD diverge.
DataSource regression() {
  torch::manual_seed(0);
  auto x = torch::randn({256, 4});
  auto y = x.sum(1, true) * 3 + 1;
  return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, y}), DataLoaderOptions(256)};
}

TEST(Tuner, LrFindSweepsTheRateSuggestsOneAndPutsTheWeightsBack) {
  torch::manual_seed(1);
  testing::TinyModule module;
  const auto before = weights_of(module);
  Trainer trainer(testing::quiet().seed(0));
  const auto found =
      Tuner(trainer).lr_find(module, regression(), LRFinderOptions().min_lr(1e-5).max_lr(10).num_training(80));
  EXPECT_TRUE(torch::equal(weights_of(module), before));
  const auto& lrs = found.lrs();
  ASSERT_GE(lrs.size(), 20u);
  EXPECT_LT(lrs.size(), 80u);  // a rate of 10 diverges: the sweep stops early
  EXPECT_DOUBLE_EQ(lrs[0], 1e-5);
  for (size_t i = 1; i < lrs.size(); ++i)  // exponential: one factor per step, 1e6 over 79 steps
    EXPECT_NEAR(std::log(lrs[i] / lrs[i - 1]), std::log(1e6) / 79, 1e-9);
  const auto suggested = found.suggestion();
  ASSERT_TRUE(suggested.has_value());
  // Where the smoothed loss falls fastest: well inside the range, below where it diverged.
  EXPECT_GT(*suggested, 1e-4);
  EXPECT_LT(*suggested, lrs.back());
  const auto at = static_cast<size_t>(std::find(lrs.begin(), lrs.end(), *suggested) - lrs.begin());
  const auto& losses = found.losses();
  EXPECT_TRUE(losses[at + 1] < losses[at] || losses[at] < losses[at - 1]) << "the loss falls there";

  const std::string csv = (arc::testing::process_scratch() / "lr_find.csv").string();
  const std::string svg = (arc::testing::process_scratch() / "lr_find.svg").string();
  found.write_csv(csv);
  found.write_svg(svg);
  std::ifstream csv_in(csv);
  std::string header;
  std::getline(csv_in, header);
  EXPECT_EQ(header, "lr,loss");
  size_t rows = 0;
  for (std::string line; std::getline(csv_in, line);) ++rows;
  EXPECT_EQ(rows, lrs.size());
  std::stringstream image;
  image << std::ifstream(svg).rdbuf();
  EXPECT_NE(image.str().find("<polyline"), std::string::npos);
  EXPECT_NE(image.str().find("suggested lr"), std::string::npos);
  std::filesystem::remove(csv);
  std::filesystem::remove(svg);
}

TEST(Tuner, LinearModeAndBadOptions) {
  testing::TinyModule module;
  Trainer trainer(testing::quiet());
  const auto found = Tuner(trainer).lr_find(
      module, regression(), LRFinderOptions().min_lr(0.001).max_lr(0.01).num_training(10).mode("linear"));
  ASSERT_EQ(found.lrs().size(), 10u);
  EXPECT_NEAR(found.lrs()[9], 0.01, 1e-12);
  EXPECT_NEAR(found.lrs()[1] - found.lrs()[0], 0.001, 1e-12);
  EXPECT_FALSE(found.suggestion().has_value());  // 10 steps: nothing left after skipping 10
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).lr_find(module, regression(), LRFinderOptions().min_lr(1).max_lr(0.1));
            }).find("must be > 0 and below max_lr"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).lr_find(module, regression(), LRFinderOptions().mode("cubic"));
            }).find("use \"exponential\" or \"linear\""),
            std::string::npos);
}

// Runs out of memory on batches of more than `limit` samples, with LibTorch's own CPU allocator
// error: it asks for a pebibyte, more than any process can map.
class Bounded : public testing::TinyModule {
 public:
  explicit Bounded(int64_t limit) : limit_(limit) {}
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    if (batch.batch_size() > limit_) torch::empty({int64_t{1} << 50}, torch::kByte);
    return TinyModule::training_step(batch, batch_idx);
  }

 private:
  int64_t limit_;
};

TEST(Tuner, ScaleBatchSizeFindsTheLargestThatFits) {
  Bounded module(40);
  const auto before = weights_of(module);
  Trainer trainer(testing::quiet());
  const auto data = testing::tiny_data(200, 2);
  EXPECT_EQ(Tuner(trainer).scale_batch_size(module, data), 32);  // 2, 4, ..., 32 fit; 64 does not
  // 64, 48 do not fit, 40 does, 44, 42, 41 do not; then 5% less (Lightning's margin).
  EXPECT_EQ(Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().mode("binsearch")), 38);
  EXPECT_EQ(Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().mode("binsearch").margin(0)), 40);
  EXPECT_TRUE(torch::equal(weights_of(module), before));
  Bounded roomy(1000);
  EXPECT_EQ(Tuner(trainer).scale_batch_size(roomy, testing::tiny_data(50, 2)), 50);  // the whole dataset
  EXPECT_EQ(Tuner(trainer).scale_batch_size(roomy, testing::tiny_data(200, 2), BatchSizeOptions().max_val(24)), 24);
  // Too large a first size is halved until one fits, as Lightning's.
  EXPECT_EQ(Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().init_val(128)), 32);
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().init_val(128).max_trials(2));
            }).find("no batch size fit in 2 trials (the last tried was 64); lower init_val (128) or raise max_trials"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().mode("linear"));
            }).find("use \"power\" or \"binsearch\""),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().margin(1));
            }).find("margin is 1; give a fraction from 0 to below 1"),
            std::string::npos);
  // Errors other than running out of memory are the trial's to report.
  struct Broken : testing::TinyModule {
    torch::Tensor training_step(Batch&, int64_t) override {
      return torch::mm(torch::ones({2, 3}), torch::ones({2, 3}));
    }
  } broken;
  EXPECT_THROW(Tuner(trainer).scale_batch_size(broken, data), c10::Error);
}

// Reads its rate from the hyper-parameter `key`, as a Lightning module reads self.lr, for SGD with
// momentum and a StepLR halving it each epoch; dropout draws from the CPU random state.
class RateModule : public TrainModule {
 public:
  explicit RateModule(double lr, std::string key = "lr") : TrainModule("RateModule"), key_(std::move(key)) {
    torch::manual_seed(3);
    linear = register_module("linear", torch::nn::Linear(4, 1));
    save_hyperparameters({{key_, lr}});
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    return torch::mse_loss(linear(torch::dropout(batch[0], 0.1, is_training())), batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(
        parameters(), torch::optim::SGDOptions(hparams().at(key_).get<double>()).momentum(0.9));
    SchedulerConfig halving;
    halving.scheduler = std::make_shared<StepLR>(*sgd, 1, 0.5);
    return {{sgd, halving}};
  }
  void on_fit_start() override { ++fit_starts; }
  void on_train_start() override { ++train_starts; }

  torch::nn::Linear linear{nullptr};
  int fit_starts = 0;
  int train_starts = 0;

 private:
  std::string key_;
};

// 256 samples of the regression in shuffled batches of 32.
DataSource shuffled_regression() {
  auto data = regression();
  data.options.batch_size(32).shuffle(true);
  return data;
}

TrainerOptions three_epochs() { return testing::quiet().seed(5).max_epochs(3); }

TEST(LearningRateFinder, TrainsAtTheSuggestedRateExactlyAsIfGivenItAndLeavesNoOtherTrace) {
  RateModule tuned(0.01);
  auto finder = std::make_shared<LearningRateFinder>(LRFinderOptions().min_lr(1e-4).max_lr(1).num_training(40));
  Trainer(three_epochs(), {finder}).fit(tuned, shuffled_regression());
  ASSERT_TRUE(finder->optimal_lr().has_value());
  EXPECT_GE(finder->optimal_lr()->lrs().size(), 20u) << "the sweep ran";
  const auto suggested = finder->optimal_lr()->suggestion();
  ASSERT_TRUE(suggested.has_value());
  EXPECT_NE(*suggested, 0.01);
  EXPECT_EQ(tuned.hparams().at("lr").get<double>(), *suggested);
  // The sweep ran the training hooks, not the fit's, as Lightning's.
  EXPECT_EQ(tuned.fit_starts, 1);
  EXPECT_EQ(tuned.train_starts, 2);

  // The same fit given the rate: the sweep's steps, data, dropout draws and optimizer are gone
  // without a trace, and the scheduler was built from the rate found.
  RateModule given(*suggested);
  Trainer(three_epochs()).fit(given, shuffled_regression());
  EXPECT_TRUE(torch::equal(weights_of(tuned), weights_of(given)));
  RateModule untuned(0.01);
  Trainer(three_epochs()).fit(untuned, shuffled_regression());
  EXPECT_FALSE(torch::equal(weights_of(tuned), weights_of(untuned)));

  // update_attr off: the curve only.
  RateModule kept(0.01);
  auto looker = std::make_shared<LearningRateFinder>(LRFinderOptions().num_training(20), false);
  Trainer(three_epochs(), {looker}).fit(kept, shuffled_regression());
  EXPECT_EQ(looker->optimal_lr()->lrs().size(), 20u);
  EXPECT_TRUE(torch::equal(weights_of(kept), weights_of(untuned)));
}

TEST(LearningRateFinder, SaysWhereItNeedsTheRateAndSkipsFastDevRunAndResumes) {
  // No hyper-parameter to write the rate into: an error before any sweep.
  testing::TinyModule no_key;
  const auto missing = testing::error_of(
      [&] { Trainer(three_epochs(), {std::make_shared<LearningRateFinder>()}).fit(no_key, shuffled_regression()); });
  EXPECT_NE(missing.find("its hyper-parameters have no \"lr\" or \"learning_rate\" and the config names no "
                         "optimizer; save the rate with save_hyperparameters"),
            std::string::npos)
      << missing;
  RateModule other_key(0.01, "base_lr");
  const auto named = testing::error_of([&] {
    Trainer(three_epochs(), {std::make_shared<LearningRateFinder>(LRFinderOptions(), true, "rate")})
        .fit(other_key, shuffled_regression());
  });
  EXPECT_NE(named.find("have no \"rate\""), std::string::npos) << named;
  RateModule by_name(0.01, "base_lr");
  auto finder = std::make_shared<LearningRateFinder>(LRFinderOptions().num_training(30), true, "base_lr");
  Trainer(three_epochs(), {finder}).fit(by_name, shuffled_regression());
  EXPECT_EQ(by_name.hparams().at("base_lr").get<double>(), finder->optimal_lr()->suggestion().value());

  // A module whose configure_optimizers does not read the key: an error after the sweep.
  testing::TinyModule ignores(0.1);
  ignores.save_hyperparameters({{"lr", 0.1}});
  const auto ignored = testing::error_of([&] {
    Trainer(three_epochs(), {std::make_shared<LearningRateFinder>(LRFinderOptions().num_training(30))})
        .fit(ignores, shuffled_regression());
  });
  EXPECT_NE(ignored.find("configure_optimizers() still builds its optimizer with lr 0.1; read the rate from "
                         "hparams()[\"lr\"] there"),
            std::string::npos)
      << ignored;

  EXPECT_NE(testing::error_of([] {
              LearningRateFinder(LRFinderOptions().num_training(1));
            }).find("lr_find: num_training (LearningRateFinder's num_training_steps) is 1; give 2 or more steps"),
            std::string::npos);

  // fast_dev_run skips the test, as Lightning's; a resumed fit keeps the checkpoint's rates.
  RateModule quick(0.01);
  auto skipped = std::make_shared<LearningRateFinder>();
  Trainer(three_epochs().fast_dev_run(2), {skipped}).fit(quick, shuffled_regression());
  EXPECT_FALSE(skipped->optimal_lr().has_value());
  const std::string checkpoint = (arc::testing::process_scratch() / "lr_finder.ckpt").string();
  RateModule first(0.01);
  Trainer one_epoch(testing::quiet().seed(5).max_epochs(1));
  one_epoch.fit(first, shuffled_regression());
  one_epoch.save_checkpoint(checkpoint);
  RateModule resumed(0.01);
  auto not_again = std::make_shared<LearningRateFinder>();
  Trainer(three_epochs(), {not_again}).fit(resumed, shuffled_regression(), {}, checkpoint);
  EXPECT_FALSE(not_again->optimal_lr().has_value());
  EXPECT_EQ(resumed.hparams().at("lr").get<double>(), 0.01);
  std::filesystem::remove(checkpoint);
}

// Runs out of memory (LibTorch's CPU allocator error) on training batches of more than `limit`;
// SGD with momentum under a one-cycle schedule over estimated_stepping_batches steps, so that the
// optimizer depends on the batch count; dropout draws from the CPU random state. Its data module
// reads the batch size from the module's hyper-parameter, as Lightning's scaled modules do.
class SizedModule : public TrainModule {
 public:
  explicit SizedModule(int64_t batch_size, int64_t limit = 40) : TrainModule("SizedModule"), limit_(limit) {
    torch::manual_seed(3);
    linear = register_module("linear", torch::nn::Linear(4, 1));
    save_hyperparameters({{"batch_size", batch_size}});
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    if (batch.batch_size() > limit_) torch::empty({int64_t{1} << 50}, torch::kByte);
    batch_sizes.insert(batch.batch_size());
    if (trainer().current_epoch() > 0) later_batch_sizes.insert(batch.batch_size());
    return torch::mse_loss(linear(torch::dropout(batch[0], 0.1, is_training())), batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    SchedulerConfig one_cycle;
    one_cycle.scheduler = std::make_shared<OneCycleLR>(*sgd, 0.05, trainer().estimated_stepping_batches());
    one_cycle.interval = Interval::step;
    return {{sgd, one_cycle}};
  }
  DataSource train_dataloader() override {
    ++data_loads;
    auto data = shuffled_regression();
    data.options.batch_size(hparams().at("batch_size").get<int64_t>());
    return data;
  }
  void on_fit_start() override { ++fit_starts; }
  void on_train_start() override { ++train_starts; }

  torch::nn::Linear linear{nullptr};
  std::set<int64_t> batch_sizes;
  /// The sizes of the fit's own batches after its first epoch (no trial runs there).
  std::set<int64_t> later_batch_sizes;
  int data_loads = 0;
  int fit_starts = 0;
  int train_starts = 0;

 private:
  int64_t limit_;
};

TEST(BatchSizeFinder, TrainsWithTheSizeItFindsExactlyAsIfGivenIt) {
  SizedModule tuned(8);
  auto finder = std::make_shared<BatchSizeFinder>();
  Trainer trainer(three_epochs(), {finder});
  trainer.fit(tuned);
  EXPECT_EQ(finder->optimal_batch_size(), 32);  // 2, 4, ..., 32 fit; 64 does not
  EXPECT_EQ(tuned.hparams().at("batch_size").get<int64_t>(), 32);
  EXPECT_EQ(trainer.num_training_batches(), 8);  // 256 samples
  EXPECT_EQ(trainer.estimated_stepping_batches(), 24);
  // The trials ran the training hooks (the last one ran out of memory in its first step), not the fit's.
  EXPECT_EQ(tuned.fit_starts, 1);
  EXPECT_EQ(tuned.train_starts, 7);

  // The same fit given the size: the trials' steps, dropout draws and optimizers leave no trace, and
  // the one-cycle schedule spans the new batch count.
  SizedModule given(32);
  Trainer(three_epochs()).fit(given);
  EXPECT_TRUE(torch::equal(weights_of(tuned), weights_of(given)));
  EXPECT_EQ(given.batch_sizes, (std::set<int64_t>{32}));
  SizedModule untuned(8);
  Trainer(three_epochs()).fit(untuned);
  EXPECT_FALSE(torch::equal(weights_of(tuned), weights_of(untuned)));

  // binsearch, from data given to fit (no hyper-parameter to write): 40 less Lightning's 5% margin.
  SizedModule bisected(8);
  auto bisecting = std::make_shared<BatchSizeFinder>(BatchSizeOptions().mode("BinSearch"));
  bisected.save_hyperparameters({});
  Trainer(three_epochs(), {bisecting}).fit(bisected, shuffled_regression());
  EXPECT_EQ(bisecting->optimal_batch_size(), 38);
  EXPECT_TRUE(bisected.batch_sizes.count(38));
}

TEST(BatchSizeFinder, KeepsTheSizeWhenTheDataIsLoadedAnewAndWhenFitResumes) {
  // reload_dataloaders_every_n_epochs asks train_dataloader() again each epoch; the size stays.
  const auto dir = testing::process_scratch() / "batch_size_resume";
  std::filesystem::remove_all(dir);
  const auto options = three_epochs().reload_dataloaders_every_n_epochs(1);
  // The finder writes no hyper-parameter here ("unused"), so the hook keeps returning batches of 8:
  // the size found must replace them at every load.
  SizedModule whole(8);
  auto checkpoints = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().dirpath(dir.string()).save_top_k(-1).filename("{epoch}"));
  Trainer(options, {std::make_shared<BatchSizeFinder>(BatchSizeOptions(), "unused"), checkpoints}).fit(whole);
  EXPECT_EQ(whole.hparams().at("batch_size").get<int64_t>(), 8);
  EXPECT_EQ(whole.later_batch_sizes, (std::set<int64_t>{32}));
  // Resumed after the first epoch: the checkpoint's size, no search, the same bits; the data is
  // loaded once when fit starts and once at each later epoch, as without the finder.
  SizedModule resumed(8);
  auto finder = std::make_shared<BatchSizeFinder>();
  Trainer(options, {finder}).fit(resumed, {}, {}, (dir / "epoch=0.ckpt").string());
  EXPECT_EQ(resumed.train_starts, 1);
  EXPECT_EQ(resumed.batch_sizes, (std::set<int64_t>{32}));
  EXPECT_EQ(resumed.data_loads, 3);
  EXPECT_EQ(finder->optimal_batch_size(), 32);
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(whole)));
  std::filesystem::remove_all(dir);
}

TEST(BatchSizeFinder, SaysWhatItCannotSearchAndSkipsFastDevRun) {
  EXPECT_NE(testing::error_of([] {
              BatchSizeFinder(BatchSizeOptions().mode("linear"));
            }).find("mode is \"linear\"; use \"power\" or \"binsearch\""),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              BatchSizeFinder(BatchSizeOptions().init_val(64).max_val(32));
            }).find("max_val (32) is below init_val (64); raise max_val or lower init_val"),
            std::string::npos);
  // Several sources side by side: the finder cannot tell which to scale.
  SizedModule combined(8);
  const auto mixed = testing::error_of([&] {
    Trainer(three_epochs(), {std::make_shared<BatchSizeFinder>()})
        .fit(combined, CombinedLoader({{"a", shuffled_regression()}, {"b", shuffled_regression()}}));
  });
  EXPECT_NE(mixed.find("BatchSizeFinder changes one source's batch size, but the fit's training data is a "
                       "CombinedLoader"),
            std::string::npos)
      << mixed;
  // Only before the first step, as the trials restart the fit's state.
  struct Later : BatchSizeFinder {
    void on_fit_start(Trainer&, TrainModule&) override {}
    void on_train_epoch_start(Trainer& trainer, TrainModule& module) override {
      if (trainer.current_epoch() == 1) scale_batch_size(trainer, module);
    }
  };
  SizedModule late(8);
  const auto later = testing::error_of([&] { Trainer(three_epochs(), {std::make_shared<Later>()}).fit(late); });
  EXPECT_NE(later.find("runs before the fit's first step, and this fit is at epoch 1, step 32"), std::string::npos)
      << later;
  // fast_dev_run skips the search, as Lightning's.
  SizedModule quick(8);
  auto skipped = std::make_shared<BatchSizeFinder>();
  Trainer(three_epochs().fast_dev_run(2), {skipped}).fit(quick);
  EXPECT_FALSE(skipped->optimal_batch_size().has_value());
  EXPECT_EQ(quick.batch_sizes, (std::set<int64_t>{8}));
}

}  // namespace
}  // namespace arc
