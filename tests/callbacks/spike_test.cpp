// SpikeDetection, Lightning's callback that ends a fit at a loss spike and lists the batches to skip.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

namespace arc {
namespace {

// (epoch, batch) pairs.
using Spikes = std::set<std::pair<int64_t, int64_t>>;

// Linear regression with noisy targets, whose batch losses settle around the noise's variance
// instead of jumping about; its loss is 1000 times larger at the given (epoch, batch) pairs, as a
// corrupt batch would make it (with the gradient of the loss as it was, so that the weights stay sane).
class SpikyModule : public TrainModule {
 public:
  explicit SpikyModule(Spikes spikes) : TrainModule("SpikyModule"), spikes_(std::move(spikes)) {
    torch::manual_seed(2);
    linear = register_module("linear", torch::nn::Linear(4, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    ++steps;
    const auto loss = torch::mse_loss(linear(batch[0]), batch[1]);
    return spikes_.count({trainer().current_epoch(), batch_idx}) ? loss + 999 * loss.detach() : loss;
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05))};
  }

  torch::nn::Linear linear{nullptr};
  int64_t steps = 0;

 private:
  Spikes spikes_;
};

// 256 samples in batches of 16: 16 batches an epoch.
DataSource noisy_regression() {
  torch::manual_seed(0);
  const auto x = torch::randn({256, 4});
  const auto y = x.sum(1, true) * 3 + 1 + 0.5 * torch::randn({256, 1});
  return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, y}), DataLoaderOptions(16)};
}

// A NaN added to a loss: the loss is NaN, its gradient (and so the weights) stay finite.
torch::Tensor not_a_number() { return torch::full({}, std::numeric_limits<float>::quiet_NaN()); }

nlohmann::json listed(const std::filesystem::path& path) { return nlohmann::json::parse(std::ifstream(path)); }

TEST(SpikeDetection, EndsFitAtASpikeAndListsTheBatchAndTheOneBefore) {
  const auto dir = testing::process_scratch() / "spikes";
  std::filesystem::remove_all(dir);
  const auto options = testing::quiet().max_epochs(3).default_root_dir(dir.string());
  SpikyModule module(Spikes{{1, 9}});
  const auto spiked = testing::error_of(
      [&] { Trainer(options, {std::make_shared<SpikeDetection>()}).fit(module, noisy_regression()); });
  EXPECT_NE(spiked.find("Training spike detected in batch 9 of epoch 1 (SpikeDetection); the batches to skip when "
                        "resuming are listed in '" +
                        (dir / "skip_batches.json").string() + "'"),
            std::string::npos)
      << spiked;
  EXPECT_EQ(listed(dir / "skip_batches.json"), nlohmann::json({8, 9}));
  EXPECT_EQ(module.steps, 16 + 10);

  // Within atol of the running mean it is no spike; and nothing is checked in the warmup batches.
  SpikyModule tolerated(Spikes{{1, 9}});
  Trainer(options, {std::make_shared<SpikeDetection>(SpikeDetectionOptions().atol(1e9))})
      .fit(tolerated, noisy_regression());
  EXPECT_EQ(tolerated.steps, 48);
  SpikyModule warming(Spikes{{1, 0}, {1, 1}});
  Trainer(options, {std::make_shared<SpikeDetection>(SpikeDetectionOptions().warmup(2))})
      .fit(warming, noisy_regression());
  EXPECT_EQ(warming.steps, 48);
  // mode "max": a fall is the spike (the loss falls a thousandfold after the spike at batch 4).
  SpikyModule falling(Spikes{{0, 4}});
  const auto fell = testing::error_of([&] {
    Trainer(options, {std::make_shared<SpikeDetection>(
                         SpikeDetectionOptions().mode("max").rtol(0.9).exclude_batches_path((dir / "max").string()))})
        .fit(falling, noisy_regression());
  });
  EXPECT_NE(fell.find("Training spike detected in batch 5 of epoch 0"), std::string::npos) << fell;
  EXPECT_EQ(listed(dir / "max" / "skip_batches.json"), nlohmann::json({4, 5}));
  std::filesystem::remove_all(dir);
}

TEST(SpikeDetection, NonFiniteLossesAreSpikesUnlessFiniteOnlyIsOff) {
  struct Diverging : SpikyModule {
    Diverging() : SpikyModule({}) {}
    torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
      const auto loss = SpikyModule::training_step(batch, batch_idx);
      return batch_idx == 6 ? loss + not_a_number() : loss;
    }
  };
  const auto dir = testing::process_scratch() / "nan_spikes";
  const auto options = testing::quiet().max_epochs(1).default_root_dir(dir.string());
  Diverging module;
  const auto spiked = testing::error_of(
      [&] { Trainer(options, {std::make_shared<SpikeDetection>()}).fit(module, noisy_regression()); });
  EXPECT_NE(spiked.find("Training spike detected in batch 6 of epoch 0"), std::string::npos) << spiked;
  // finite_only off: a NaN is no spike, and the running mean leaves it out (a NaN in it would hide
  // the real spike after it).
  struct Both : SpikyModule {
    Both() : SpikyModule(Spikes{{0, 10}}) {}
    torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
      const auto loss = SpikyModule::training_step(batch, batch_idx);
      return batch_idx == 6 ? loss + not_a_number() : loss;
    }
  } both;
  const auto after_nan = testing::error_of([&] {
    Trainer(options, {std::make_shared<SpikeDetection>(SpikeDetectionOptions().finite_only(false))})
        .fit(both, noisy_regression());
  });
  EXPECT_NE(after_nan.find("Training spike detected in batch 10 of epoch 0"), std::string::npos) << after_nan;
  EXPECT_EQ(testing::error_of([] { SpikeDetection(SpikeDetectionOptions().mode("lower")); }),
            "SpikeDetection: mode is \"lower\"; use \"min\" (a loss) or \"max\"");
  std::filesystem::remove_all(dir);
}

// A fit resumed from the checkpoint written at the spike (OnExceptionCheckpoint) keeps the list, so
// a later spike adds to it, as Lightning's state_dict keeps bad_batches.
TEST(SpikeDetection, AResumedFitKeepsTheListAndTheRunningMean) {
  const auto dir = testing::process_scratch() / "spike_resume";
  std::filesystem::remove_all(dir);
  const auto options = testing::quiet().max_epochs(3).default_root_dir(dir.string());
  SpikyModule first(Spikes{{0, 9}});
  const auto saved = std::make_shared<OnExceptionCheckpoint>(dir.string());
  EXPECT_NE(testing::error_of([&] {
              Trainer(options, {std::make_shared<SpikeDetection>(), saved}).fit(first, noisy_regression());
            }).find("batch 9 of epoch 0"),
            std::string::npos);
  EXPECT_EQ(listed(dir / "skip_batches.json"), nlohmann::json({8, 9}));
  // warmup 0: the resumed fit checks its first batch against the running mean it kept (a mean of no
  // value would let it pass).
  SpikyModule resumed(Spikes{{0, 10}});
  auto detection = std::make_shared<SpikeDetection>(SpikeDetectionOptions().warmup(0));
  const auto again = testing::error_of([&] {
    Trainer(options, {detection}).fit(resumed, noisy_regression(), {}, (dir / "on_exception.ckpt").string());
  });
  EXPECT_NE(again.find("batch 10 of epoch 0"), std::string::npos) << again;
  EXPECT_EQ(listed(dir / "skip_batches.json"), nlohmann::json({8, 9, 9, 10}));
  EXPECT_EQ(resumed.steps, 1);
  // The same resume without the spike trains on to the end.
  SpikyModule calm(Spikes{});
  Trainer(options, {std::make_shared<SpikeDetection>()})
      .fit(calm, noisy_regression(), {}, (dir / "on_exception.ckpt").string());
  EXPECT_EQ(calm.steps, 6 + 16 * 2);
  std::filesystem::remove_all(dir);
}

// A list that cannot be written (here its folder would be under a file) is an arc::Error naming the
// spike, the setting and the path, not a bare filesystem exception.
TEST(SpikeDetection, AListItCannotWriteIsAnErrorNamingExcludeBatchesPath) {
  const auto dir = testing::process_scratch() / "spike_unwritable";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a_file") << "not a folder";
  const auto path = dir / "a_file" / "lists" / "skip.json";
  SpikyModule module(Spikes{{0, 9}});
  const auto failed = testing::error_of([&] {
    Trainer(testing::quiet().max_epochs(1).default_root_dir(dir.string()),
            {std::make_shared<SpikeDetection>(SpikeDetectionOptions().exclude_batches_path(path.string()))})
        .fit(module, noisy_regression());
  });
  EXPECT_NE(failed.find("SpikeDetection found a spike in batch 9 of epoch 0 but cannot make the folder of its "
                        "exclude_batches_path '" +
                        path.string() + "' ("),
            std::string::npos)
      << failed;
  EXPECT_NE(failed.find("set exclude_batches_path (or default_root_dir) to a folder it can write"), std::string::npos)
      << failed;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace arc
