#include <arc/base/error.h>
#include <arc/core/lr_scheduler.h>
#include <arc/core/optimizer_registry.h>

#include <support/errors.h>

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

// The rate before each of the first `steps` steps.
std::vector<double> rates(Fixture& f, LRScheduler& scheduler, int steps) {
  std::vector<double> seen;
  for (int i = 0; i < steps; ++i) {
    seen.push_back(f.lr());
    scheduler.step();
  }
  return seen;
}

void expect_rates(const std::vector<double>& seen, const std::vector<double>& expected) {
  ASSERT_EQ(seen.size(), expected.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_NEAR(seen[i], expected[i], 1e-12) << "step " << i;
}

// The expected rates below are PyTorch 1.13's (torch.optim.lr_scheduler, SGD with lr 1.0).
TEST(LRScheduler, PolynomialDecaysToZeroAndStays) {
  Fixture f;
  PolynomialLR poly(f.sgd, 4, 2.0);
  expect_rates(rates(f, poly, 6), {1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0});
}

TEST(LRScheduler, WarmRestartsRestartAtTheBaseRate) {
  Fixture a;
  CosineAnnealingWarmRestarts fixed(a.sgd, 3, 1, 0.1);
  expect_rates(rates(a, fixed, 7), {1.0, 0.775, 0.325, 1.0, 0.775, 0.325, 1.0});
  Fixture b;
  CosineAnnealingWarmRestarts doubling(b.sgd, 2, 2);
  expect_rates(rates(b, doubling, 15), {1.0, 0.5, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 1.0,
                                        0.9619397662556434, 0.8535533905932737, 0.6913417161825449, 0.5,
                                        0.30865828381745514, 0.14644660940672627, 0.03806023374435663, 1.0});
}

TEST(LRScheduler, LambdaScalesTheBaseRateAndResumes) {
  Fixture a;
  LambdaLR decay(a.sgd, [](int64_t step) { return std::pow(0.95, static_cast<double>(step)); });
  expect_rates(rates(a, decay, 4), {1.0, 0.95, 0.9025, 0.8573749999999999});
  Fixture b;
  LambdaLR resumed(b.sgd, [](int64_t step) { return std::pow(0.95, static_cast<double>(step)); });
  resumed.load_state_dict(decay.state_dict());
  EXPECT_NEAR(b.lr(), 0.95 * 0.8573749999999999, 1e-12);
  EXPECT_THROW(LambdaLR(b.sgd, nullptr), Error);
}

TEST(LRScheduler, OneCycleRisesThenAnnealsAndCyclesMomentum) {
  Fixture f;
  torch::optim::SGD sgd({f.w}, torch::optim::SGDOptions(1.0).momentum(0.9));
  OneCycleLR cycle(sgd, 0.1, 10);
  std::vector<double> lrs, momenta;
  for (int i = 0; i <= 10; ++i) {
    const auto& options = static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
    lrs.push_back(options.lr());
    momenta.push_back(options.momentum());
    if (i < 10) cycle.step();
  }
  expect_rates(lrs, {0.0040000000000000036, 0.052000000000000005, 0.1, 0.09504846320134738, 0.0811745653949763,
                     0.06112620219362893, 0.03887419780637107, 0.0188258346050237, 0.004951936798652629, 4e-07,
                     0.004951936798652624});
  expect_rates(momenta, {0.95, 0.8999999999999999, 0.85, 0.854951556604879, 0.8688255099070633, 0.8888739533021842,
                         0.9111260466978157, 0.9311744900929366, 0.945048443395121, 0.95, 0.945048443395121});
  EXPECT_THROW(cycle.step(), Error);  // an 11th step is past total_steps, as in PyTorch
}

TEST(LRScheduler, OneCycleThreePhasesLinearOnAdamsBeta1AndResume) {
  Fixture f;
  OneCycleLR::Options options;
  options.cosine(false);
  options.three_phase(true);
  const auto run = [&](torch::optim::Adam& adam, OneCycleLR& cycle, int steps) {
    std::vector<double> lrs, betas;
    for (int i = 0; i < steps; ++i) {
      const auto& o = static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options());
      lrs.push_back(o.lr());
      betas.push_back(std::get<0>(o.betas()));
      cycle.step();
    }
    return std::make_pair(lrs, betas);
  };
  torch::optim::Adam adam({f.w}, torch::optim::AdamOptions(1.0));
  OneCycleLR cycle(adam, 0.1, 10, options);
  const auto [lrs, betas] = run(adam, cycle, 10);
  expect_rates(lrs, {0.004, 0.052000000000000005, 0.1, 0.052000000000000005, 0.0040000000000000036, 0.00320008,
                     0.00240016, 0.0016002400000000002, 0.0008003200000000002, 4.0000000000022656e-07});
  expect_rates(betas, {0.95, 0.8999999999999999, 0.85, 0.8999999999999999, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95});
  // A scheduler made afresh and loaded from step 3 sets the rate and beta1 of step 3.
  torch::optim::Adam other({f.w}, torch::optim::AdamOptions(1.0));
  OneCycleLR resumed(other, 0.1, 10, options);
  resumed.load_state_dict({{"last_epoch", 3}, {"base_lrs", {1.0}}});
  const auto& o = static_cast<torch::optim::AdamOptions&>(other.param_groups()[0].options());
  EXPECT_NEAR(o.lr(), lrs[3], 1e-12);
  EXPECT_NEAR(std::get<0>(o.betas()), betas[3], 1e-12);
  EXPECT_NEAR(std::get<1>(o.betas()), 0.999, 1e-12);
}

TEST(LRScheduler, OneCycleRefusesWhatPyTorchCannotRun) {
  Fixture f;
  EXPECT_THROW(OneCycleLR(f.sgd, 0.1, 0), Error);
  OneCycleLR::Options bad_split;
  bad_split.pct_start(0.2);  // 0.2 · 10 - 1 = 1 step: fine; 0.1 · 10 - 1 = 0: a phase of no length
  EXPECT_NO_THROW(OneCycleLR(f.sgd, 0.1, 10, bad_split));
  bad_split.pct_start(0.1);
  EXPECT_THROW(OneCycleLR(f.sgd, 0.1, 10, bad_split), Error);
  torch::optim::Adagrad adagrad({f.w}, torch::optim::AdagradOptions(1.0));
  EXPECT_THROW(OneCycleLR(adagrad, 0.1, 10), Error);  // no momentum to cycle
  OneCycleLR::Options still;
  still.cycle_momentum(false);
  EXPECT_NO_THROW(OneCycleLR(adagrad, 0.1, 10, still));
}

TEST(LRScheduler, ConfigsNameTheNewSchedulersWithPyTorchsArguments) {
  Fixture a;
  const auto warm = lr_scheduler_registry().create(
      "CosineAnnealingWarmRestarts", a.sgd, Config({{"T_0", 2}, {"T_mult", 2}, {"interval", "step"}}, "lr_scheduler"));
  EXPECT_EQ(warm->interval, Interval::step);
  expect_rates(rates(a, *warm->scheduler, 4), {1.0, 0.5, 1.0, 0.8535533905932737});
  Fixture b;
  const auto poly = lr_scheduler_registry().create("PolynomialLR", b.sgd,
                                                   Config({{"total_iters", 4}, {"power", 2.0}}, "lr_scheduler"));
  expect_rates(rates(b, *poly->scheduler, 3), {1.0, 0.5625, 0.25});
  Fixture c;
  const auto cycle = lr_scheduler_registry().create(
      "OneCycleLR", c.sgd,
      Config({{"max_lr", 0.1}, {"total_steps", 10}, {"cycle_momentum", false}, {"interval", "step"}}, "lr_scheduler"));
  expect_rates(rates(c, *cycle->scheduler, 3), {0.0040000000000000036, 0.052000000000000005, 0.1});
  EXPECT_THROW(lr_scheduler_registry().create(
                   "OneCycleLR", c.sgd,
                   Config({{"max_lr", 0.1}, {"total_steps", 10}, {"anneal_strategy", "cosine"}}, "lr_scheduler")),
               Error);
}

// An SGD of rate 0.1 and momentum 0.9, as PyTorch's values below were taken with
// (torch.optim.SGD(params, lr=0.1, momentum=0.9), PyTorch 1.13).
struct MomentumFixture {
  torch::Tensor w = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd{std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(0.1).momentum(0.9)};
  double lr() const { return sgd.param_groups()[0].options().get_lr(); }
  double momentum() const {
    return static_cast<const torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).momentum();
  }
};

// The rates (and momenta) before each of `steps` steps and after the last.
std::pair<std::vector<double>, std::vector<double>> trace(MomentumFixture& f, LRScheduler& scheduler, int steps) {
  std::vector<double> lrs{f.lr()}, momenta{f.momentum()};
  for (int i = 0; i < steps; ++i) {
    scheduler.step();
    lrs.push_back(f.lr());
    momenta.push_back(f.momentum());
  }
  return {lrs, momenta};
}

// ConstantLR, MultiplicativeLR and CyclicLR follow PyTorch's arithmetic, so their rates are its
// bits; ChainedScheduler multiplies closed forms, within 1e-12 of PyTorch's chained steps.
TEST(LRScheduler, ConstantMultiplicativeAndCyclicAreBitsOfPyTorchs) {
  MomentumFixture a;
  ConstantLR constant(a.sgd, 0.25, 3);
  EXPECT_EQ(trace(a, constant, 5).first, (std::vector<double>{0.025, 0.025, 0.025, 0.1, 0.1, 0.1}));
  MomentumFixture b;
  MultiplicativeLR multiplied(b.sgd, [](int64_t e) { return e % 2 ? 0.9 : 0.7; });
  EXPECT_EQ(trace(b, multiplied, 6).first,
            (std::vector<double>{0.1, 0.09000000000000001, 0.063, 0.0567, 0.039689999999999996, 0.035720999999999996,
                                 0.025004699999999994}));
  EXPECT_EQ(multiplied.lr_at(0.1, 6), 0.025004699999999994);
  MomentumFixture c;
  CyclicLR triangular(c.sgd, 0.01, 0.1, CyclicLR::Options().step_size_up(3).step_size_down(2));
  const auto [lrs, momenta] = trace(c, triangular, 12);
  EXPECT_EQ(lrs, (std::vector<double>{0.01, 0.039999999999999994, 0.06999999999999999, 0.09999999999999999, 0.055, 0.01,
                                      0.04000000000000003, 0.06999999999999999, 0.09999999999999999,
                                      0.05500000000000005, 0.01, 0.04000000000000003, 0.06999999999999999}));
  EXPECT_EQ(momenta, (std::vector<double>{0.9, 0.8666666666666667, 0.8333333333333334, 0.8, 0.8500000000000001, 0.9,
                                          0.8666666666666667, 0.8333333333333334, 0.8, 0.85, 0.9, 0.8666666666666667,
                                          0.8333333333333334}));
  MomentumFixture d;
  CyclicLR halving(d.sgd, 0.01, 0.1, CyclicLR::Options().step_size_up(2).mode("triangular2"));
  EXPECT_EQ(trace(d, halving, 12).first,
            (std::vector<double>{0.01, 0.05500000000000001, 0.1, 0.05500000000000001, 0.01, 0.0325, 0.05500000000000001,
                                 0.0325, 0.01, 0.02125, 0.0325, 0.02125, 0.01}));
  // exp_range on Adam, its beta1 left alone.
  auto w = torch::zeros({1}, torch::requires_grad());
  torch::optim::Adam adam({w}, torch::optim::AdamOptions(0.1));
  CyclicLR ranged(adam, 0.01, 0.1,
                  CyclicLR::Options().step_size_up(2).mode("exp_range").gamma(0.9).cycle_momentum(false));
  std::vector<double> seen;
  for (int i = 0; i < 10; ++i, ranged.step()) seen.push_back(adam.param_groups()[0].options().get_lr());
  EXPECT_EQ(seen,
            (std::vector<double>{0.01, 0.05050000000000001, 0.0829, 0.04280500000000001, 0.01, 0.03657205000000001,
                                 0.05782969000000001, 0.03152336050000001, 0.01, 0.027433922005000007}));
  EXPECT_EQ(std::get<0>(static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options()).betas()), 0.9);
  MomentumFixture e;
  auto half = std::make_shared<ConstantLR>(e.sgd, 0.5, 2);
  auto decay = std::make_shared<ExponentialLR>(e.sgd, 0.9);
  ChainedScheduler chained(e.sgd, {half, decay});
  const auto chained_lrs = trace(e, chained, 5).first;
  const std::vector<double> pytorch = {
      0.05, 0.045000000000000005, 0.08100000000000002, 0.07290000000000002, 0.06561000000000002, 0.05904900000000002};
  ASSERT_EQ(chained_lrs.size(), pytorch.size());
  for (size_t i = 0; i < pytorch.size(); ++i) EXPECT_NEAR(chained_lrs[i], pytorch[i], 1e-12) << "step " << i;
}

// A resume mid-cycle continues where the run was: rates and momentum.
TEST(LRScheduler, CyclicAndMultiplicativeResumeFromTheirState) {
  MomentumFixture a, b;
  CyclicLR first(a.sgd, 0.01, 0.1, CyclicLR::Options().step_size_up(3));
  for (int i = 0; i < 4; ++i) first.step();
  CyclicLR resumed(b.sgd, 0.01, 0.1, CyclicLR::Options().step_size_up(3));
  resumed.load_state_dict(first.state_dict());
  EXPECT_EQ(b.lr(), a.lr());
  EXPECT_EQ(b.momentum(), a.momentum());
  first.step();
  resumed.step();
  EXPECT_EQ(b.lr(), a.lr());
  MomentumFixture c, d;
  const auto lambda = [](int64_t e) { return 1.0 - 0.01 * static_cast<double>(e); };
  MultiplicativeLR stepped(c.sgd, lambda);
  for (int i = 0; i < 5; ++i) stepped.step();
  MultiplicativeLR loaded(d.sgd, lambda);
  loaded.load_state_dict(stepped.state_dict());
  EXPECT_EQ(d.lr(), c.lr());
}

TEST(LRScheduler, ConstantAndCyclicFromConfigsAndTheirErrors) {
  MomentumFixture a;
  const auto constant = lr_scheduler_registry().create("ConstantLR", a.sgd,
                                                       Config({{"factor", 0.25}, {"total_iters", 3}}, "lr_scheduler"));
  EXPECT_EQ(trace(a, *constant->scheduler, 3).first, (std::vector<double>{0.025, 0.025, 0.025, 0.1}));
  MomentumFixture b;
  const auto cyclic = lr_scheduler_registry().create(
      "CyclicLR", b.sgd,
      Config({{"base_lr", 0.01}, {"max_lr", 0.1}, {"step_size_up", 3}, {"step_size_down", 2}, {"interval", "step"}},
             "lr_scheduler"));
  EXPECT_EQ(cyclic->interval, Interval::step);
  EXPECT_EQ(trace(b, *cyclic->scheduler, 3).first,
            (std::vector<double>{0.01, 0.039999999999999994, 0.06999999999999999, 0.09999999999999999}));
  MomentumFixture c;
  EXPECT_NE(testing::error_of([&] {
              CyclicLR(c.sgd, 0.01, 0.1, CyclicLR::Options().mode("triangle"));
            }).find("CyclicLR mode must be \"triangular\", \"triangular2\" or \"exp_range\""),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { ConstantLR(c.sgd, 0.0); }).find("ConstantLR factor must be in (0, 1]"),
            std::string::npos);
  auto w = torch::zeros({1}, torch::requires_grad());
  torch::optim::Adagrad adagrad({w}, torch::optim::AdagradOptions(0.1));
  EXPECT_NE(testing::error_of([&] { CyclicLR(adagrad, 0.01, 0.1); }).find("CyclicLR cycle_momentum needs an optimizer"),
            std::string::npos);
  auto plateau = std::make_shared<ReduceLROnPlateau>(c.sgd);
  EXPECT_NE(testing::error_of([&] { ChainedScheduler(c.sgd, {plateau}); }).find("ReduceLROnPlateau, TorchLRScheduler"),
            std::string::npos);
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

// A LibTorch scheduler plugged in as is steps as it does alone, and a fresh one resumes it exactly.
TEST(LRScheduler, LibTorchSchedulersRunAsIsAndResume) {
  Fixture plain;
  torch::optim::StepLR alone(plain.sgd, 2, 0.5);
  Fixture wrapped;
  TorchLRScheduler scheduler(wrapped.sgd, std::make_shared<torch::optim::StepLR>(wrapped.sgd, 2, 0.5));
  for (int i = 0; i < 5; ++i) {
    alone.step();
    scheduler.step(std::nullopt);
    EXPECT_EQ(wrapped.lr(), plain.lr()) << "step " << i;
  }
  EXPECT_EQ(wrapped.lr(), 0.25);

  Fixture resumed;
  TorchLRScheduler again(resumed.sgd, std::make_shared<torch::optim::StepLR>(resumed.sgd, 2, 0.5));
  again.load_state_dict(scheduler.state_dict());
  EXPECT_EQ(resumed.lr(), 0.25);
  EXPECT_EQ(again.last_epoch(), 5);
  for (int i = 0; i < 4; ++i) {
    scheduler.step(std::nullopt);
    again.step(std::nullopt);
    EXPECT_EQ(resumed.lr(), wrapped.lr()) << "step " << 5 + i;
  }
  Fixture fresh;
  TorchLRScheduler behind(fresh.sgd, std::make_shared<torch::optim::StepLR>(fresh.sgd, 2, 0.5));
  behind.load_state_dict(scheduler.state_dict());
  auto earlier = scheduler.state_dict();
  earlier["last_epoch"] = 3;
  EXPECT_THROW(behind.load_state_dict(earlier), Error) << "a LibTorch scheduler cannot step back";
  EXPECT_THROW(behind.lr_at(1.0, 0), Error);
}

TEST(LRScheduler, BadArgumentsAreErrors) {
  Fixture f;
  EXPECT_THROW(StepLR(f.sgd, 0), Error);
  EXPECT_THROW(MultiStepLR(f.sgd, {3, 1}), Error);
  EXPECT_THROW(ReduceLROnPlateau(f.sgd, ReduceLROnPlateau::Mode::min, 1.5), Error);
  EXPECT_THROW(PolynomialLR(f.sgd, 0), Error);
  EXPECT_THROW(CosineAnnealingWarmRestarts(f.sgd, 0), Error);
  EXPECT_THROW(CosineAnnealingWarmRestarts(f.sgd, 2, 0), Error);
}

}  // namespace
}  // namespace arc
