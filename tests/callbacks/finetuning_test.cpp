// BaseFinetuning and BackboneFinetuning (Lightning's): the backbone stays frozen until its epoch,
// then trains in its own parameter group at a rate that grows to the rest's; a resumed fit goes on
// exactly (Lightning's re-freezes the backbone, issue 21901); TrainModule::freeze/unfreeze; the
// callbacks' setup and teardown hooks. Under DDP: ddp_test.cpp.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace arc {
namespace {

namespace fs = std::filesystem;

// A backbone (Linear, BatchNorm, ReLU) and a head; the optimizer takes what requires gradients.
class Transfer : public TrainModule {
 public:
  Transfer() : TrainModule("Transfer") {
    torch::manual_seed(0);
    backbone = register_module(
        "backbone", torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::BatchNorm1d(6), torch::nn::ReLU()));
    head = register_module("head", torch::nn::Linear(6, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    std::vector<double> rates;
    for (const auto& group : trainer().optimizer_configs().front().optimizer->param_groups())
      rates.push_back(group.options().get_lr());
    rates_by_step[global_step()] = rates;
    return torch::mse_loss(head(backbone->forward(batch[0])), batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    std::vector<torch::Tensor> trainable;
    for (const auto& p : parameters())
      if (p.requires_grad()) trainable.push_back(p);
    auto sgd = std::make_shared<torch::optim::SGD>(trainable, torch::optim::SGDOptions(0.1).momentum(0.9));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 5, 0.9), Interval::step, 1, ""})};
  }
  torch::Tensor backbone_weights() { return backbone[0]->as<torch::nn::Linear>()->weight.detach().clone(); }
  torch::Tensor running_mean() { return backbone[1]->as<torch::nn::BatchNorm1d>()->running_mean.clone(); }

  torch::nn::Sequential backbone{nullptr};
  torch::nn::Linear head{nullptr};
  /// The rates at an epoch's first step (16 samples in batches of 4).
  std::vector<double> epoch_rates(int64_t epoch) { return rates_by_step[epoch * 4]; }
  std::map<int64_t, std::vector<double>> rates_by_step;
};

// The backbone's weights and running mean at the start of each epoch.
class EpochWatch : public Callback {
 public:
  std::string state_key() const override { return "EpochWatch"; }
  void on_train_epoch_start(Trainer&, TrainModule& module) override {
    auto& transfer = dynamic_cast<Transfer&>(module);
    weights.push_back(transfer.backbone_weights());
    means.push_back(transfer.running_mean());
  }
  std::vector<torch::Tensor> weights, means;
};

TrainerOptions finetune_options(int64_t epochs) { return testing::quiet().max_epochs(epochs).seed(1); }

DataSource finetune_data() {
  auto data = testing::tiny_data(16, 4);
  data.options.shuffle(true);
  return data;
}

TEST(BackboneFinetuning, FreezesTheBackboneUntilItsEpochThenRaisesItsRateToTheRest) {
  Transfer module;
  auto finetuning =
      std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions().unfreeze_backbone_at_epoch(2).verbose(true));
  auto watch = std::make_shared<EpochWatch>();
  Trainer(finetune_options(7), {finetuning, watch}).fit(module, finetune_data());
  // Frozen through epochs 0 and 1; trained from epoch 2 on.
  EXPECT_TRUE(torch::equal(watch->weights[0], watch->weights[2]));
  EXPECT_FALSE(torch::equal(watch->weights[2], watch->weights[3]));
  EXPECT_EQ(module.epoch_rates(1).size(), 1u);
  // The head's rate (StepLR, every 5 steps) times 0.1 at epoch 2, then doubled each epoch until it
  // would pass the head's, where it stays (should_align).
  std::vector<double> expected_backbone;
  for (int64_t epoch = 2; epoch < 7; ++epoch) {
    const double head = module.epoch_rates(epoch)[0];
    ASSERT_EQ(module.epoch_rates(epoch).size(), 2u) << "epoch " << epoch;
    const double backbone = module.epoch_rates(epoch)[1];
    if (epoch == 2) {
      EXPECT_DOUBLE_EQ(backbone, 0.1 * head);
    } else {
      const double doubled = 2 * expected_backbone.back();
      EXPECT_DOUBLE_EQ(backbone, std::min(doubled, head)) << "epoch " << epoch;
    }
    expected_backbone.push_back(backbone);
  }
  EXPECT_DOUBLE_EQ(expected_backbone.back(), module.epoch_rates(6)[0]);  // aligned by then
  EXPECT_TRUE(module.backbone->parameters().front().requires_grad());
}

// train_bn false: the BatchNorm layer's parameters and running statistics stay as they are while
// frozen (training normalizes by the batch, as Lightning's), and update after the unfreezing.
TEST(BackboneFinetuning, AFrozenBatchNormKeepsItsStatisticsUntilUnfrozen) {
  Transfer module;
  auto watch = std::make_shared<EpochWatch>();
  Trainer(finetune_options(4),
          {std::make_shared<BackboneFinetuning>(
               BackboneFinetuningOptions().unfreeze_backbone_at_epoch(2).train_bn(false).backbone_initial_lr(0.05)),
           watch})
      .fit(module, finetune_data());
  EXPECT_TRUE(torch::equal(watch->means[0], watch->means[2]));
  EXPECT_FALSE(torch::equal(watch->means[2], watch->means[3]));
  auto norm = module.backbone[1]->as<torch::nn::BatchNorm1d>();
  EXPECT_EQ(norm->options.momentum(), 0.1);  // given back
  // As Lightning's, the frozen epochs' batches are not counted: 2 epochs of 4 since the unfreezing.
  EXPECT_EQ(norm->num_batches_tracked.item<int64_t>(), 8);
  EXPECT_EQ(module.epoch_rates(2)[1], 0.05);
  EXPECT_DOUBLE_EQ(module.epoch_rates(3)[1], std::min(2 * 0.05, module.epoch_rates(3)[0]));
}

// Lightning's resumed fit re-freezes a backbone unfrozen before the interruption, and calls
// finetune_function again at the resumed epoch's start; here a fit resumed after any batch ends
// bit-identical to the uninterrupted one, frozen or not.
TEST(BackboneFinetuning, AFitResumedAfterAnyBatchEndsBitIdentical) {
  const auto options = [] { return BackboneFinetuningOptions().unfreeze_backbone_at_epoch(1).train_bn(false); };
  Transfer reference;
  Trainer(finetune_options(4), {std::make_shared<BackboneFinetuning>(options())}).fit(reference, finetune_data());
  const auto expected = testing::weights_of(reference);
  const auto dir = arc::testing::process_scratch() / "finetune";
  fs::create_directories(dir);
  for (int64_t k = 1; k < 16; ++k) {
    const auto path = (dir / ("k" + std::to_string(k) + ".ckpt")).string();
    Transfer interrupted;
    Trainer(finetune_options(4),
            {std::make_shared<BackboneFinetuning>(options()), std::make_shared<testing::StopAfter>(k, path)})
        .fit(interrupted, finetune_data());
    Transfer resumed;
    Trainer(finetune_options(4), {std::make_shared<BackboneFinetuning>(options())})
        .fit(resumed, finetune_data(), {}, path);
    EXPECT_TRUE(torch::equal(testing::weights_of(resumed), expected)) << "resumed after batch " << k;
    EXPECT_TRUE(torch::equal(resumed.running_mean(), reference.running_mean())) << "resumed after batch " << k;
    EXPECT_EQ(resumed.rates_by_step[15], reference.rates_by_step[15]) << "resumed after batch " << k;
  }
  fs::remove_all(dir);
}

TEST(BackboneFinetuning, BadInputNamesTheFix) {
  Transfer module;
  const auto missing = testing::error_of([&] {
    Trainer(finetune_options(1),
            {std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions().backbone("encoder"))})
        .fit(module, finetune_data());
  });
  EXPECT_NE(missing.find("BackboneFinetuning: Transfer has no submodule 'encoder'; register the part to finetune"),
            std::string::npos)
      << missing;
  EXPECT_NE(testing::error_of([] {
              BackboneFinetuning(BackboneFinetuningOptions().unfreeze_backbone_at_epoch(-1));
            }).find("unfreeze_backbone_at_epoch is -1"),
            std::string::npos);
  // A dotted path names a deeper module.
  Transfer deeper;
  Trainer(finetune_options(1),
          {std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions().backbone("backbone.0").train_bn(false))})
      .fit(deeper, finetune_data());
  EXPECT_FALSE(deeper.backbone[0]->as<torch::nn::Linear>()->weight.requires_grad());
  EXPECT_TRUE(deeper.head->weight.requires_grad());
}

// An optimizer given the frozen backbone too: a warning says so, no group is added, and the first
// group's rate stays its scheduler's (Lightning's would set it as the backbone's, its last group).
class TransferOverEveryParameter : public Transfer {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 5, 0.9), Interval::step, 1, ""})};
  }
};

TEST(BackboneFinetuning, AnOptimizerHoldingTheFrozenBackboneKeepsItsRates) {
  TransferOverEveryParameter module;
  Trainer(finetune_options(4),
          {std::make_shared<BackboneFinetuning>(BackboneFinetuningOptions().unfreeze_backbone_at_epoch(1))})
      .fit(module, finetune_data());
  for (int64_t epoch = 1; epoch < 4; ++epoch) {
    ASSERT_EQ(module.epoch_rates(epoch).size(), 1u);
    EXPECT_DOUBLE_EQ(module.epoch_rates(epoch)[0], 0.1 * std::pow(0.9, epoch * 4 / 5)) << "epoch " << epoch;
  }
}

// LightningCLI's printed init_args run as printed; lambda_func takes a number too.
TEST(BackboneFinetuning, BuildsFromLightningCliPrintedInitArgs) {
  const auto printed = nlohmann::json::parse(R"({
    "class_path": "lightning.pytorch.callbacks.BackboneFinetuning",
    "init_args": {"unfreeze_backbone_at_epoch": 1, "lambda_func": "lightning.pytorch.callbacks.finetuning.multiplicative",
                  "backbone_initial_ratio_lr": 0.1, "backbone_initial_lr": null, "should_align": true,
                  "initial_denom_lr": 10.0, "train_bn": true, "verbose": false, "rounding": 12}})");
  Transfer module;
  Trainer(finetune_options(3), callbacks_from_json(printed, "trainer.callbacks")).fit(module, finetune_data());
  EXPECT_DOUBLE_EQ(module.epoch_rates(2)[1], 2 * module.epoch_rates(1)[1]);
  auto constant = printed;
  constant["init_args"]["lambda_func"] = 1.5;
  Transfer other;
  Trainer(finetune_options(3), callbacks_from_json(constant, "trainer.callbacks")).fit(other, finetune_data());
  EXPECT_DOUBLE_EQ(other.epoch_rates(2)[1], 1.5 * other.epoch_rates(1)[1]);
  auto bad = printed;
  bad["init_args"]["lambda_func"] = "my.module.schedule";
  const auto error = testing::error_of([&] { callbacks_from_json(bad, "trainer.callbacks"); });
  EXPECT_NE(error.find("lambda_func' must be a number"), std::string::npos) << error;
  EXPECT_NE(error.find("BackboneFinetuningOptions::lambda_func"), std::string::npos) << error;
}

// Lightning's freeze: no parameter requires gradients and the module evaluates; unfreeze undoes it.
TEST(TrainModule, FreezeAndUnfreeze) {
  Transfer module;
  module.freeze();
  for (const auto& p : module.parameters()) EXPECT_FALSE(p.requires_grad());
  EXPECT_FALSE(module.is_training());
  module.unfreeze();
  for (const auto& p : module.parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(module.is_training());
}

// A callback's setup comes before the module's and before configure_optimizers; its teardown
// before the module's, as Lightning's.
class SetupOrder : public testing::TinyModule {
 public:
  void setup(Stage) override { record("module.setup"); }
  void teardown(Stage) override { record("module.teardown"); }
  std::vector<OptimizerConfig> configure_optimizers() override {
    record("configure_optimizers");
    return TinyModule::configure_optimizers();
  }
};

class SetupRecorder : public Callback {
 public:
  std::string state_key() const override { return "SetupRecorder"; }
  void setup(Trainer&, TrainModule& module, Stage stage) override {
    dynamic_cast<SetupOrder&>(module).record(stage == Stage::fit ? "callback.setup fit" : "callback.setup other");
  }
  void teardown(Trainer&, TrainModule& module, Stage) override {
    dynamic_cast<SetupOrder&>(module).record("callback.teardown");
  }
};

TEST(Callback, SetupAndTeardownComeBeforeTheModules) {
  SetupOrder module;
  Trainer trainer(testing::quiet().max_epochs(1), {std::make_shared<SetupRecorder>()});
  trainer.fit(module, testing::tiny_data(4, 2));
  trainer.validate(module, testing::tiny_data(4, 2));
  std::vector<std::string> seen;
  for (const auto& hook : module.hooks)
    if (hook.find("setup") != std::string::npos || hook.find("teardown") != std::string::npos ||
        hook == "configure_optimizers")
      seen.push_back(hook);
  EXPECT_EQ(seen, (std::vector<std::string>{"callback.setup fit", "module.setup", "configure_optimizers",
                                            "callback.teardown", "module.teardown", "callback.setup other",
                                            "module.setup", "callback.teardown", "module.teardown"}));
}

}  // namespace
}  // namespace arc
