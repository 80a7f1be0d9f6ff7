// WeightAveraging and EMAWeightAveraging (issue 18, row 4): the averages follow their formulas,
// validation in fit sees them and fit ends with them. Checkpoints and resume: checkpoint_test.cpp.
#include "support/errors.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

// Records the weights after every optimizer step and what validation saw.
class Watched : public testing::TinyModule {
 public:
  void on_train_batch_end(const torch::Tensor&, Batch&, int64_t) override {
    stepped.push_back(linear->weight.detach().clone());
  }
  void validation_step(Batch& batch, int64_t batch_idx) override {
    validated_with = linear->weight.detach().clone();
    TinyModule::validation_step(batch, batch_idx);
  }
  std::vector<torch::Tensor> stepped;
  torch::Tensor validated_with;
};

TEST(WeightAveraging, AnExponentialMovingAverageFollowsItsFormula) {
  Watched module;
  auto ema = std::make_shared<EMAWeightAveraging>(0.5);
  Trainer trainer(testing::quiet().max_epochs(1).num_sanity_val_steps(0), {ema});
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(2, 2));
  ASSERT_EQ(module.stepped.size(), 4u);
  auto expected = module.stepped[0].clone();
  for (size_t i = 1; i < module.stepped.size(); ++i) expected.lerp_(module.stepped[i], 0.5);
  EXPECT_TRUE(torch::equal(module.linear->weight, expected));  // fit ends with the average
  EXPECT_TRUE(torch::equal(module.validated_with, expected));  // and validated with it
  EXPECT_FALSE(torch::equal(expected, module.stepped.back()));
  EXPECT_EQ(ema->updates(), 4);
}

TEST(WeightAveraging, TheDefaultAverageIsTheMeanOfEveryUpdate) {
  Watched module;
  auto mean = std::make_shared<WeightAveraging>();
  Trainer(testing::quiet().max_epochs(1), {mean}).fit(module, testing::tiny_data(8, 2));
  const auto expected = torch::stack(module.stepped).mean(0);
  EXPECT_TRUE(torch::allclose(module.linear->weight, expected, 1e-6, 1e-7));
}

TEST(WeightAveraging, EmaUpdatesEveryNStepsFromTheFirstStepAsked) {
  const auto updates = [](std::shared_ptr<EMAWeightAveraging> ema, int64_t epochs) {
    testing::TinyModule module;
    Trainer(testing::quiet().max_epochs(epochs), {ema}).fit(module, testing::tiny_data(8, 2));
    return ema->updates();
  };
  EXPECT_EQ(updates(std::make_shared<EMAWeightAveraging>(0.9, 2), 1), 2);                   // steps 0 and 2
  EXPECT_EQ(updates(std::make_shared<EMAWeightAveraging>(0.9, 1, 3), 1), 1);                // step 3
  EXPECT_EQ(updates(std::make_shared<EMAWeightAveraging>(0.9, 1, std::nullopt, 1), 2), 4);  // epoch 1's
  EXPECT_NE(testing::error_of([] { EMAWeightAveraging(1.5); }).find("decay is 1.5"), std::string::npos);
}

}  // namespace
}  // namespace arc
