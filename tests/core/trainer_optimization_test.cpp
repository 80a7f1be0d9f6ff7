// The optimization step: accumulation, clipping, schedulers, manual optimization, several
// optimizers, determinism.
#include "support/tiny_module.h"

#include "support/errors.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace arc {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

torch::Tensor flat_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : module.parameters()) parts.push_back(p.detach().flatten().clone());
  return torch::cat(parts);
}

TEST(TrainerOptimization, AccumulationStepsAtBoundariesAndEpochEnd) {
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).accumulate_grad_batches(3));
  trainer.fit(module, tiny_data(14, 2));  // 7 batches: steps after 3, 6 and the last
  EXPECT_EQ(module.counts["training_step"], 7);
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_EQ(module.counts["on_before_optimizer_step"], 3);
  EXPECT_EQ(module.counts["on_before_zero_grad"], 3);
}

TEST(TrainerOptimization, AccumulatingTwoHalfBatchesEqualsOneFullBatch) {
  TinyModule accumulated, full;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < accumulated.parameters().size(); ++i)
      full.parameters()[i].copy_(accumulated.parameters()[i]);
  }
  Trainer a(quiet().max_epochs(1).accumulate_grad_batches(2));
  a.fit(accumulated, tiny_data(8, 2));
  Trainer b(quiet().max_epochs(1));
  b.fit(full, tiny_data(8, 4));
  EXPECT_TRUE(torch::allclose(flat_parameters(accumulated), flat_parameters(full), 1e-6, 1e-7));
}

// Loss = 100 * sum(w): every gradient element is 100, so clipping decides the update.
class SteepModule : public TinyModule {
 public:
  SteepModule() : TinyModule(1.0) {}
  torch::Tensor training_step(Batch&, int64_t) override { return linear->weight.sum() * 100; }
};

// A config's optimizer reaches only modules that build theirs with configured_optimizer; ignoring it
// silently would train with another optimizer than the config says.
TEST(TrainerOptimization, AConfigOptimizerTheModuleDoesNotTakeIsAnError) {
  TinyModule module;
  module.set_optimizer_config({{"class_path", "Adam"}}, nullptr);
  const auto message = error_of([&] { Trainer(quiet().max_steps(1)).fit(module, tiny_data(4, 2)); });
  EXPECT_NE(message.find("configure_optimizers() does not take it; build the optimizer with configured_optimizer("),
            std::string::npos)
      << message;
}

// A value an optimizer cannot take is an error of the config that names the key, as a scheduler's
// or a callback's is; LibTorch's own check (an optimizer registered without one) loses its C++ stack
// trace.
TEST(TrainerOptimization, AnOptimizerValueItCannotTakeNamesItsKey) {
  const auto error_for = [](const nlohmann::json& optimizer) {
    return error_of([&] { TinyModule().set_optimizer_config(optimizer, nullptr); });
  };
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"class_path", "Adam"}, {"init_args", {{"lr", -1}}}},
       "optimizer.init_args.lr (Adam): Adam lr must be >= 0, got -1"},
      {{{"class_path", "AdamW"}, {"init_args", {{"betas", {1.5, 0.9}}}}},
       "optimizer.init_args.betas (AdamW): AdamW betas must each be in [0, 1), got [1.5, 0.9]"},
      {{{"class_path", "Adam"}, {"init_args", {{"eps", -1e-8}}}},
       "optimizer.init_args.eps (Adam): Adam eps must be >= 0, got -1e-08"},
      {{{"class_path", "SGD"}, {"init_args", {{"lr", -0.1}}}}, "optimizer.init_args.lr (SGD): SGD lr must be >= 0"},
      {{{"class_path", "SGD"}, {"init_args", {{"lr", 0.1}, {"nesterov", true}}}},
       "optimizer.init_args.nesterov (SGD): SGD nesterov needs momentum > 0 and dampening 0, got momentum 0 and "
       "dampening 0"},
      {{{"class_path", "SGD"}, {"init_args", {{"lr", 0.1}, {"weight_decay", -0.5}}}},
       "optimizer.init_args.weight_decay (SGD): SGD weight_decay must be >= 0, got -0.5"},
      {{{"class_path", "RMSprop"}, {"init_args", {{"alpha", -1}}}},
       "optimizer.init_args.alpha (RMSprop): RMSprop alpha must be >= 0, got -1"},
      {{{"class_path", "Adagrad"}, {"init_args", {{"lr_decay", -1}}}},
       "optimizer.init_args.lr_decay (Adagrad): Adagrad lr_decay must be >= 0, got -1"}};
  for (const auto& [optimizer, expected] : cases)
    EXPECT_EQ(error_for(optimizer).rfind(expected, 0), 0u) << error_for(optimizer);

  optimizer_registry().add("UncheckedSGD", [](std::vector<torch::Tensor> parameters, const Config& config) {
    return std::make_shared<torch::optim::SGD>(std::move(parameters),
                                               torch::optim::SGDOptions(config.get<double>("lr", 0.1)));
  });
  const auto unchecked = error_for({{"class_path", "UncheckedSGD"}, {"init_args", {{"lr", -1}}}});
  EXPECT_EQ(unchecked, "optimizer (UncheckedSGD): Invalid learning rate: -1");
}

TEST(TrainerOptimization, GradientClippingByNormAndByValue) {
  SteepModule by_norm;
  const auto before = by_norm.linear->weight.detach().clone();
  Trainer norm(quiet().max_steps(1).gradient_clip_val(1.0));
  norm.fit(by_norm, tiny_data(2, 2));
  EXPECT_NEAR((before - by_norm.linear->weight.detach()).norm().item<double>(), 1.0, 1e-5);

  SteepModule by_value;
  const auto start = by_value.linear->weight.detach().clone();
  Trainer value(quiet().max_steps(1).gradient_clip_val(0.25).gradient_clip_algorithm("value"));
  value.fit(by_value, tiny_data(2, 2));
  EXPECT_TRUE(torch::allclose(start - by_value.linear->weight.detach(), torch::full({1, 4}, 0.25)));
}

class ScheduledModule : public TinyModule {
 public:
  explicit ScheduledModule(Interval interval, std::string monitor = "")
      : interval_(interval), monitor_(std::move(monitor)) {}
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1.0));
    std::shared_ptr<LRScheduler> scheduler;
    if (monitor_.empty()) {
      scheduler = std::make_shared<StepLR>(*sgd, 1, 0.5);
    } else {
      scheduler = std::make_shared<ReduceLROnPlateau>(*sgd, ReduceLROnPlateau::Mode::min, 0.5, 0);
    }
    return {OptimizerConfig(sgd, SchedulerConfig{scheduler, interval_, 1, monitor_})};
  }
  void on_train_epoch_start() override {
    lrs.push_back(trainer().optimizer_configs()[0].optimizer->param_groups()[0].options().get_lr());
  }
  std::vector<double> lrs;

 private:
  Interval interval_;
  std::string monitor_;
};

TEST(TrainerOptimization, SchedulersStepPerEpochOrPerStep) {
  ScheduledModule per_epoch(Interval::epoch);
  Trainer a(quiet().max_epochs(3));
  a.fit(per_epoch, tiny_data(4, 2));
  EXPECT_EQ(per_epoch.lrs, (std::vector<double>{1.0, 0.5, 0.25}));

  ScheduledModule per_step(Interval::step);
  Trainer b(quiet().max_epochs(3));
  b.fit(per_step, tiny_data(4, 2));
  EXPECT_EQ(per_step.lrs, (std::vector<double>{1.0, 0.25, 0.0625}));
}

// OneCycleLR over the steps the trainer says the fit will take, stepped every optimizer step.
class OneCycleModule : public TinyModule {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    estimate = trainer().estimated_stepping_batches();
    auto scheduler = std::make_shared<OneCycleLR>(*sgd, 0.1, estimate);
    return {OptimizerConfig(sgd, SchedulerConfig{scheduler, Interval::step, 1, ""})};
  }
  int64_t estimate = 0;
};

TEST(TrainerOptimization, EstimatedSteppingBatchesIsEveryStepOfTheFit) {
  // 7 batches, 3 per optimizer step: 3 steps an epoch. OneCycleLR throws if stepped past it.
  OneCycleModule epochs;
  Trainer a(quiet().max_epochs(3).accumulate_grad_batches(3));
  a.fit(epochs, tiny_data(14, 2));
  EXPECT_EQ(epochs.estimate, 9);
  EXPECT_EQ(a.global_step(), 9);
  EXPECT_EQ(a.estimated_stepping_batches(), 9);

  OneCycleModule capped;
  Trainer b(quiet().max_epochs(3).max_steps(5));
  b.fit(capped, tiny_data(14, 2));
  EXPECT_EQ(capped.estimate, 5);
  EXPECT_EQ(b.global_step(), 5);

  OneCycleModule steps_only;
  Trainer c(quiet().max_epochs(-1).max_steps(4));
  c.fit(steps_only, tiny_data(14, 2));
  EXPECT_EQ(steps_only.estimate, 4);

  Trainer before(quiet());
  EXPECT_NE(error_of([&] { before.estimated_stepping_batches(); }).find("once fit has started"), std::string::npos);
  OneCycleModule endless;
  Trainer d(quiet().max_epochs(-1));
  EXPECT_NE(error_of([&] { d.fit(endless, tiny_data(14, 2)); }).find("set max_steps"), std::string::npos);
}

TEST(TrainerOptimization, PlateauSchedulerReadsTheMonitoredMetric) {
  ScheduledModule plateau(Interval::epoch, "val_loss");
  Trainer trainer(quiet().max_epochs(2).num_sanity_val_steps(0));
  trainer.fit(plateau, tiny_data(4, 2), tiny_data(4, 2));
  EXPECT_EQ(plateau.lrs.size(), 2u);

  ScheduledModule missing(Interval::epoch, "val_los");
  Trainer bad(quiet().max_epochs(2).num_sanity_val_steps(0));
  try {
    bad.fit(missing, tiny_data(4, 2), tiny_data(4, 2));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("monitors 'val_los'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("val_loss"), std::string::npos) << error.what();
  }
}

// Two optimizers stepped by hand, GAN-style: the first on even batches, both on odd ones.
class ManualModule : public TrainModule {
 public:
  ManualModule() {
    a = register_module("a", torch::nn::Linear(4, 1));
    b = register_module("b", torch::nn::Linear(4, 1));
    set_automatic_optimization(false);
  }
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    auto opts = optimizers();
    auto loss_a = torch::mse_loss(a(batch[0]), batch[1]);
    opts[0].zero_grad();
    manual_backward(loss_a);
    opts[0].step();
    if (batch_idx % 2 == 1) {
      auto loss_b = torch::mse_loss(b(batch[0]), batch[1]);
      opts[1].zero_grad();
      manual_backward(loss_b);
      opts[1].step();
    }
    return loss_a.detach();
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(0.1)),
            std::make_shared<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.1))};
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

TEST(TrainerOptimization, ManualOptimizationCountsEveryOptimizerStep) {
  ManualModule module;
  const auto b_before = module.b->weight.detach().clone();
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module, tiny_data(8, 2));
  EXPECT_EQ(trainer.global_step(), 4 + 2);
  EXPECT_FALSE(torch::equal(b_before, module.b->weight.detach()));
}

class TwoOptimizers : public TinyModule {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {
        std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{linear->weight}, torch::optim::SGDOptions(0.1)),
        std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{linear->bias}, torch::optim::AdamOptions(0.1))};
  }
};

// Lightning refuses several optimizers under automatic optimization and points to manual optimization.
// The loggers' step is Lightning's _batches_that_stepped: one per batch however many optimizers a
// manually optimized batch steps, one per accumulation window, and a resumed fit goes on counting.
struct StepRecorder : Logger {
  std::vector<int64_t> steps;
  std::string name() const override { return "steps"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    if (metrics.count("loss_a") || metrics.count("train_loss")) steps.push_back(step);
  }
};

struct LoggingManualModule : ManualModule {
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    auto loss = ManualModule::training_step(batch, batch_idx);
    log("loss_a", loss);
    return loss;
  }
};

TEST(TrainerOptimization, LoggersStepOncePerBatchOrWindowAsLightningDoes) {
  // 4 batches an epoch, each stepping once or twice (6 optimizer steps): logged at batches 1 and
  // 3 of each epoch, at the stepped batches before them.
  auto whole = std::make_shared<StepRecorder>();
  LoggingManualModule manual;
  Trainer trainer(quiet().max_epochs(2).log_every_n_steps(2), {}, {whole});
  trainer.fit(manual, tiny_data(8, 2));
  EXPECT_EQ(trainer.global_step(), 12);
  EXPECT_EQ(trainer.progress().stepped_batches, 8);
  EXPECT_EQ(whole->steps, (std::vector<int64_t>{1, 3, 5, 7}));

  // The same fit stopped after its first epoch and resumed logs at the same steps.
  const auto path = (arc::testing::process_scratch() / "stepped.ckpt").string();
  auto first = std::make_shared<StepRecorder>(), second = std::make_shared<StepRecorder>();
  LoggingManualModule resumed;
  Trainer one(quiet().max_epochs(1).log_every_n_steps(2), {}, {first});
  one.fit(resumed, tiny_data(8, 2));
  one.save_checkpoint(path);
  Trainer two(quiet().max_epochs(2).log_every_n_steps(2), {}, {second});
  two.fit(resumed, tiny_data(8, 2), {}, path);
  fs::remove(path);
  EXPECT_EQ(first->steps, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(second->steps, (std::vector<int64_t>{5, 7}));

  // 8 batches in windows of 2: every 2nd window logged once, at its index (batches 3 and 7).
  auto windows = std::make_shared<StepRecorder>();
  TinyModule accumulated;
  Trainer(quiet().max_epochs(1).accumulate_grad_batches(2).log_every_n_steps(2), {}, {windows})
      .fit(accumulated, tiny_data(16, 2));
  EXPECT_EQ(windows->steps, (std::vector<int64_t>{1, 3}));
}

TEST(TrainerOptimization, AutomaticOptimizationRefusesSeveralOptimizers) {
  TwoOptimizers module;
  Trainer trainer(quiet().max_steps(2));
  const auto message = testing::error_of([&] { trainer.fit(module, tiny_data(4, 2)); });
  EXPECT_NE(message.find("returned 2 optimizers, but automatic optimization steps one"), std::string::npos) << message;
  EXPECT_NE(message.find("set_automatic_optimization(false)"), std::string::npos) << message;
}

// Under manual optimization the module steps its schedulers itself: the Trainer steps none, not even
// those of interval epoch (Lightning's rule).
class ManualScheduled : public ManualModule {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(1.0));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 1, 0.5), Interval::epoch, 1, ""}),
            std::make_shared<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.1))};
  }
};

TEST(TrainerOptimization, ManualOptimizationStepsNoScheduler) {
  ManualScheduled module;
  Trainer trainer(quiet().max_epochs(3));
  trainer.fit(module, tiny_data(8, 2));
  EXPECT_DOUBLE_EQ(trainer.optimizer_configs()[0].optimizer->param_groups()[0].options().get_lr(), 1.0);
}

TEST(TrainerOptimization, SeedMakesShuffledRunsIdentical) {
  const auto run = [](uint64_t seed) {
    TinyModule module;
    {
      torch::NoGradGuard no_grad;
      for (auto& p : module.parameters()) p.fill_(0.1);
    }
    Trainer trainer(quiet().max_epochs(2).seed(seed).deterministic(true));
    auto data = tiny_data(20, 3);
    data.options.shuffle(true);
    trainer.fit(module, data);
    return std::make_pair(flat_parameters(module), module.seen_first_values);
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_TRUE(torch::equal(a.first, b.first));
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.second, c.second);
}

}  // namespace
}  // namespace arc
