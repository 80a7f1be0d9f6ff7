// The Tuner (issue 18, row 2): lr_find, the learning-rate range test, and scale_batch_size.
#include "support/errors.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

  const std::string csv = "/tmp/arc_lr_find_" + std::to_string(getpid()) + ".csv";
  const std::string svg = "/tmp/arc_lr_find_" + std::to_string(getpid()) + ".svg";
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

// Runs out of memory, as the allocator would, on batches of more than `limit` samples.
class Bounded : public testing::TinyModule {
 public:
  explicit Bounded(int64_t limit) : limit_(limit) {}
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    if (batch.batch_size() > limit_) throw std::bad_alloc();
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
  EXPECT_EQ(Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().mode("binsearch")), 40);
  EXPECT_TRUE(torch::equal(weights_of(module), before));
  Bounded roomy(1000);
  EXPECT_EQ(Tuner(trainer).scale_batch_size(roomy, testing::tiny_data(50, 2)), 50);  // the whole dataset
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().init_val(64));
            }).find("no batch size fit"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              Tuner(trainer).scale_batch_size(module, data, BatchSizeOptions().mode("linear"));
            }).find("use \"power\" or \"binsearch\""),
            std::string::npos);
}

}  // namespace
}  // namespace arc
