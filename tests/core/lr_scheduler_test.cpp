#include <arc/base/error.h>
#include <arc/core/lr_scheduler.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace arc {
namespace {

struct Fixture {
  torch::Tensor w = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd{std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(1.0)};
  double lr() const { return sgd.param_groups()[0].options().get_lr(); }
};

TEST(LRScheduler, StepLRDecaysEveryStepSize) {
  Fixture f;
  StepLR scheduler(f.sgd, 2, 0.5);
  std::vector<double> seen;
  for (int i = 0; i < 5; ++i) {
    seen.push_back(f.lr());
    scheduler.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.25}));
}

TEST(LRScheduler, MultiStepAndExponential) {
  Fixture a;
  MultiStepLR multi(a.sgd, {1, 3}, 0.1);
  multi.step();
  EXPECT_DOUBLE_EQ(a.lr(), 0.1);
  multi.step();
  multi.step();
  EXPECT_NEAR(a.lr(), 0.01, 1e-15);
  Fixture b;
  ExponentialLR exponential(b.sgd, 0.9);
  exponential.step();
  exponential.step();
  EXPECT_DOUBLE_EQ(b.lr(), 0.81);
}

TEST(LRScheduler, CosineReachesEtaMinAtTMax) {
  Fixture f;
  CosineAnnealingLR cosine(f.sgd, 10, 0.1);
  for (int i = 0; i < 5; ++i) cosine.step();
  EXPECT_NEAR(f.lr(), 0.55, 1e-12);
  for (int i = 0; i < 5; ++i) cosine.step();
  EXPECT_NEAR(f.lr(), 0.1, 1e-12);
}

TEST(LRScheduler, WarmupThenCosineChain) {
  Fixture f;
  auto warmup = std::make_shared<LinearWarmup>(f.sgd, 4, 0.25);
  auto cosine = std::make_shared<CosineAnnealingLR>(f.sgd, 8);
  SequentialLR chain(f.sgd, {warmup, cosine}, {4});
  std::vector<double> seen;
  for (int i = 0; i < 9; ++i) {
    seen.push_back(f.lr());
    chain.step();
  }
  EXPECT_DOUBLE_EQ(seen[0], 0.25);
  EXPECT_DOUBLE_EQ(seen[2], 0.625);
  EXPECT_DOUBLE_EQ(seen[4], 1.0);  // cosine phase starts at its base rate
  EXPECT_NEAR(seen[8], 0.5, 1e-12);
}

TEST(LRScheduler, ReduceOnPlateauCutsAfterPatience) {
  Fixture f;
  ReduceLROnPlateau plateau(f.sgd, ReduceLROnPlateau::Mode::min, 0.5, 1);
  plateau.step(1.0);
  plateau.step(1.0);
  EXPECT_DOUBLE_EQ(f.lr(), 1.0);
  plateau.step(1.0);
  EXPECT_DOUBLE_EQ(f.lr(), 0.5);
  plateau.step(0.5);
  EXPECT_DOUBLE_EQ(f.lr(), 0.5);
  EXPECT_THROW(plateau.step(std::nullopt), Error);
}

TEST(LRScheduler, StateRoundTrips) {
  Fixture a;
  StepLR first(a.sgd, 1, 0.5);
  first.step();
  first.step();
  Fixture b;
  StepLR second(b.sgd, 1, 0.5);
  second.load_state_dict(first.state_dict());
  EXPECT_DOUBLE_EQ(b.lr(), 0.25);
  EXPECT_EQ(second.last_epoch(), 2);
}

TEST(LRScheduler, BadArgumentsAreErrors) {
  Fixture f;
  EXPECT_THROW(StepLR(f.sgd, 0), Error);
  EXPECT_THROW(MultiStepLR(f.sgd, {3, 1}), Error);
  EXPECT_THROW(ReduceLROnPlateau(f.sgd, ReduceLROnPlateau::Mode::min, 1.5), Error);
}

}  // namespace
}  // namespace arc
