// arc::Accelerator in one process: precision in a hand-written loop, against the Trainer.
#include "support/errors.h"
#include "support/tiny_module.h"

#include <arc/base/torch_compat.h>
#include <arc/fabric/accelerator.h>

#include <gtest/gtest.h>

namespace arc {
namespace {

using namespace testing;

// Linear(4, 1) regression whose loss is taken in float (LibTorch 1.13 has no bfloat16 mse_loss
// on the CPU).
struct Regression : TrainModule {
  Regression() : TrainModule("Regression") { linear = register_module("linear", torch::nn::Linear(4, 1)); }
  torch::Tensor loss(const Batch& batch) {
    output_type = linear(batch[0]).scalar_type();
    return torch::mse_loss(linear(batch[0]).to(torch::kFloat), batch[1].to(torch::kFloat));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override { return loss(batch); }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1))};
  }
  torch::nn::Linear linear{nullptr};
  torch::ScalarType output_type = torch::kFloat;
};

TEST(Accelerator, HandWrittenLoopUnderBf16MixedEndsLikeTheTrainer) {
  Regression by_trainer;
  Regression by_hand;
  {
    torch::NoGradGuard no_grad;
    by_hand.linear->weight.copy_(by_trainer.linear->weight);
    by_hand.linear->bias.copy_(by_trainer.linear->bias);
  }
  Trainer(quiet().max_epochs(3).precision("bf16-mixed")).fit(by_trainer, tiny_data(16, 4));

  Accelerator accelerator(quiet().precision("bf16-mixed"));
  accelerator.prepare(by_hand);
  torch::optim::SGD sgd(by_hand.parameters(), torch::optim::SGDOptions(0.1));
  accelerator.prepare(sgd);
  auto loader = accelerator.prepare(tiny_data(16, 4));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader->set_epoch(epoch);
    loader->start();
    while (auto batch = loader->next()) {
      sgd.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = accelerator.autocast();
        loss = by_hand.loss(accelerator.prepare_batch(*batch));
      }
      accelerator.backward(loss);
      EXPECT_TRUE(accelerator.step(sgd));
    }
  }
  EXPECT_EQ(by_hand.output_type, torch::kBFloat16);
  EXPECT_EQ(by_hand.linear->weight.scalar_type(), torch::kFloat);
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU)) << "autocast ends with its guard";
  EXPECT_TRUE(torch::equal(by_hand.linear->weight, by_trainer.linear->weight));
  EXPECT_TRUE(torch::equal(by_hand.linear->bias, by_trainer.linear->bias));
  // Outside the guard the same forward runs in float.
  by_hand.loss(accelerator.prepare_batch(Batch({torch::ones({2, 4}), torch::zeros({2, 1})})));
  EXPECT_EQ(by_hand.output_type, torch::kFloat);
}

TEST(Accelerator, TruePrecisionCastsModelAndFloatingInputs) {
  Accelerator accelerator(quiet().precision("64-true"));
  Regression module;
  accelerator.prepare(module);
  EXPECT_EQ(module.linear->weight.scalar_type(), torch::kDouble);
  const Batch batch({torch::ones({2, 4}), torch::zeros({2}, torch::kLong)});
  const auto moved = accelerator.prepare_batch(batch);
  EXPECT_EQ(moved[0].scalar_type(), torch::kDouble);
  EXPECT_EQ(moved[1].scalar_type(), torch::kLong) << "labels keep their type";
  EXPECT_EQ(accelerator.precision(), "64-true");
}

TEST(Accelerator, PrecisionNamesFollowTheTrainer) {
  EXPECT_EQ(Accelerator(quiet().precision("16-mixed")).precision(), "bf16-mixed") << "16-mixed needs CUDA";
  EXPECT_EQ(Accelerator(quiet()).precision(), "32-true");
  const auto message = error_of([] { Accelerator accelerator(quiet().precision("fp8")); });
  EXPECT_NE(message.find("unknown precision 'fp8'"), std::string::npos) << message;
}

}  // namespace
}  // namespace arc
