// The hooks users override to change the loop (issue 18, row 6): optimizer_step,
// optimizer_zero_grad, configure_gradient_clipping, lr_scheduler_step, toggle_optimizer,
// configure_callbacks, the batch-transfer hooks, skipping a batch with an undefined loss, and
// configure_model.
#include "support/tiny_module.h"

#include "support/errors.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

namespace arc {
namespace {

using testing::error_of;
using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

double learning_rate(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups()[0].options().get_lr();
}

// Lightning's documented use: a linear warm-up of the learning rate over the first steps.
class WarmUp : public TinyModule {
 public:
  WarmUp() : TinyModule(0.4) {}
  void optimizer_step(int64_t epoch, int64_t batch_idx, TrainerOptimizer& optimizer) override {
    calls.emplace_back(epoch, batch_idx);
    const double scale = std::min(1.0, static_cast<double>(global_step() + 1) / 4);
    for (auto& group : optimizer.optimizer().param_groups()) group.options().set_lr(0.4 * scale);
    stepped_at.push_back(learning_rate(optimizer.optimizer()));
    optimizer.step();
  }
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::vector<double> stepped_at;
};

TEST(ModuleHooks, OptimizerStepOverrideWarmsUpTheLearningRate) {
  WarmUp module;
  Trainer trainer(quiet().max_epochs(2).accumulate_grad_batches(2));
  trainer.fit(module, tiny_data(12, 2));  // 6 batches: steps after batches 1, 3 and 5 of each epoch
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_EQ(module.calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 3}, {0, 5}, {1, 1}, {1, 3}, {1, 5}}));
  const std::vector<double> expected{0.1, 0.2, 0.3, 0.4, 0.4, 0.4};
  ASSERT_EQ(module.stepped_at.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(module.stepped_at[i], expected[i], 1e-12);
  EXPECT_EQ(module.counts["on_before_optimizer_step"], 6);
}

// An optimizer_step that steps only on even steps: the others leave weights, global step and the
// step-interval scheduler alone.
class EveryOtherStep : public TinyModule {
 public:
  void optimizer_step(int64_t, int64_t batch_idx, TrainerOptimizer& optimizer) override {
    const auto before = linear->weight.detach().clone();
    if (batch_idx % 2 == 0) optimizer.step();
    unchanged_when_left_out = unchanged_when_left_out && (batch_idx % 2 == 0 || torch::equal(before, linear->weight));
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1.0));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<StepLR>(*sgd, 1, 0.5), Interval::step, 1, ""})};
  }
  void lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric) override {
    ++scheduler_steps;
    TinyModule::lr_scheduler_step(scheduler, metric);
  }
  bool unchanged_when_left_out = true;
  int64_t scheduler_steps = 0;
};

TEST(ModuleHooks, AnOptimizerStepThatDoesNotStepLeavesTheStepOut) {
  EveryOtherStep module;
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module, tiny_data(12, 2));
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_TRUE(module.unchanged_when_left_out);
  EXPECT_EQ(module.scheduler_steps, 3);
  EXPECT_DOUBLE_EQ(learning_rate(*trainer.optimizer_configs()[0].optimizer), 0.125);
}

// optimizer_zero_grad that clears nothing: the second window's gradient still holds the first's.
class ZeroesOrNot : public TinyModule {
 public:
  explicit ZeroesOrNot(bool clear) : clear_(clear) {}
  void optimizer_zero_grad(int64_t epoch, int64_t batch_idx, torch::optim::Optimizer& optimizer) override {
    calls.emplace_back(epoch, batch_idx);
    if (clear_) TinyModule::optimizer_zero_grad(epoch, batch_idx, optimizer);
  }
  void on_before_optimizer_step(torch::optim::Optimizer&) override { grads.push_back(linear->weight.grad().clone()); }
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::vector<torch::Tensor> grads;

 private:
  bool clear_;
};

TEST(ModuleHooks, OptimizerZeroGradOverrideDecidesWhatIsCleared) {
  ZeroesOrNot kept(false), cleared(true);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < kept.parameters().size(); ++i) cleared.parameters()[i].copy_(kept.parameters()[i]);
  }
  Trainer a(quiet().max_steps(2).accumulate_grad_batches(2));
  a.fit(kept, tiny_data(8, 2));
  Trainer b(quiet().max_steps(2).accumulate_grad_batches(2));
  b.fit(cleared, tiny_data(8, 2));
  EXPECT_EQ(kept.calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 2}}));
  ASSERT_EQ(kept.grads.size(), 2u);
  ASSERT_EQ(cleared.grads.size(), 2u);
  EXPECT_TRUE(torch::equal(kept.grads[0], cleared.grads[0]));
  EXPECT_TRUE(torch::allclose(kept.grads[1], cleared.grads[0] + cleared.grads[1]));
  EXPECT_FALSE(torch::allclose(kept.grads[1], cleared.grads[1]));
}

// Loss = 100 * sum(w): every gradient element is 100, so clipping alone decides the update.
class ClipsItself : public TinyModule {
 public:
  ClipsItself() : TinyModule(1.0) {}
  torch::Tensor training_step(Batch&, int64_t) override { return linear->weight.sum() * 100; }
  void configure_gradient_clipping(torch::optim::Optimizer& optimizer, std::optional<double> gradient_clip_val,
                                   const std::string& gradient_clip_algorithm) override {
    given = {gradient_clip_val, gradient_clip_algorithm};
    clip_gradients(optimizer, 0.5, "norm");
  }
  std::pair<std::optional<double>, std::string> given;
};

TEST(ModuleHooks, ConfigureGradientClippingOverridesTheTrainersClipping) {
  ClipsItself module;
  const auto before = module.linear->weight.detach().clone();
  Trainer trainer(quiet().max_steps(1).gradient_clip_val(3.0).gradient_clip_algorithm("value"));
  trainer.fit(module, tiny_data(2, 2));
  EXPECT_EQ(module.given.first, 3.0);
  EXPECT_EQ(module.given.second, "value");
  EXPECT_NEAR((before - module.linear->weight.detach()).norm().item<double>(), 0.5, 1e-5);

  ClipsItself unclipped;
  Trainer no_option(quiet().max_steps(1));
  no_option.fit(unclipped, tiny_data(2, 2));
  EXPECT_FALSE(unclipped.given.first.has_value());
  EXPECT_EQ(unclipped.given.second, "norm");
}

class ClipsWrongly : public TinyModule {
 public:
  void configure_gradient_clipping(torch::optim::Optimizer& optimizer, std::optional<double>,
                                   const std::string&) override {
    clip_gradients(optimizer, 1.0, "nrm");
  }
};

TEST(ModuleHooks, ClipGradientsNamesAWrongAlgorithm) {
  ClipsWrongly module;
  const auto message = error_of([&] { Trainer(quiet().max_steps(1)).fit(module, tiny_data(2, 2)); });
  EXPECT_NE(message.find("the algorithm \"nrm\" (gradient_clip_algorithm, or Fabric::clip_gradients' algorithm) "
                         "is unknown; use \"norm\""),
            std::string::npos)
      << message;
}

// A plateau scheduler stepped through lr_scheduler_step, which sees the monitored value.
class SeesTheMetric : public TinyModule {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    auto plateau = std::make_shared<ReduceLROnPlateau>(*sgd, ReduceLROnPlateau::Mode::min, 0.5, 0);
    return {OptimizerConfig(sgd, SchedulerConfig{plateau, Interval::epoch, 1, "val_loss"})};
  }
  void lr_scheduler_step(LRScheduler& scheduler, std::optional<double> metric) override {
    metrics.push_back(metric);
    if (current_epoch() != 1) scheduler.step(metric);
  }
  std::vector<std::optional<double>> metrics;
};

TEST(ModuleHooks, LrSchedulerStepGetsTheMonitoredValue) {
  SeesTheMetric module;
  Trainer trainer(quiet().max_epochs(3).num_sanity_val_steps(0));
  trainer.fit(module, tiny_data(4, 2), tiny_data(4, 2));
  ASSERT_EQ(module.metrics.size(), 3u);
  for (const auto& metric : module.metrics) {
    ASSERT_TRUE(metric.has_value());
    EXPECT_GT(*metric, 0);
  }
  EXPECT_DOUBLE_EQ(*module.metrics.back(), trainer.callback_metrics().at("val_loss"));
}

// GAN-style: while one optimizer is toggled, only its parameters require gradients; a parameter
// frozen before stays frozen after untoggle.
class Toggles : public TrainModule {
 public:
  Toggles() {
    a = register_module("a", torch::nn::Linear(4, 1));
    b = register_module("b", torch::nn::Linear(4, 1));
    b->bias.set_requires_grad(false);
    set_automatic_optimization(false);
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto opts = optimizers();
    toggle_optimizer(opts[0].optimizer());
    seen.push_back({a->weight.requires_grad(), b->weight.requires_grad(), b->bias.requires_grad()});
    auto loss = torch::mse_loss(b(a(batch[0]).expand({-1, 4})), batch[1]);
    opts[0].zero_grad();
    manual_backward(loss);
    b_got_gradient = b_got_gradient || b->weight.grad().defined();
    opts[0].step();
    untoggle_optimizer(opts[0].optimizer());
    seen.push_back({a->weight.requires_grad(), b->weight.requires_grad(), b->bias.requires_grad()});
    return loss.detach();
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(0.1)),
            std::make_shared<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.1))};
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
  std::vector<std::vector<bool>> seen;
  bool b_got_gradient = false;
};

TEST(ModuleHooks, ToggleOptimizerFreezesTheOtherOptimizersParameters) {
  Toggles module;
  Trainer trainer(quiet().max_steps(2));
  trainer.fit(module, tiny_data(4, 2));
  ASSERT_EQ(module.seen.size(), 4u);
  EXPECT_EQ(module.seen[0], (std::vector<bool>{true, false, false}));
  EXPECT_EQ(module.seen[1], (std::vector<bool>{true, true, false}));
  EXPECT_FALSE(module.b_got_gradient);
  EXPECT_EQ(trainer.global_step(), 2);
}

class NamedCheckpoint : public ModelCheckpoint {
 public:
  NamedCheckpoint() : ModelCheckpoint(ModelCheckpointOptions().filename("mine")) {}
};

class CountsFits : public Callback {
 public:
  std::string state_key() const override { return "CountsFits"; }
  void on_fit_start(Trainer&, TrainModule&) override { ++fits; }
  int64_t fits = 0;
};

class BringsCallbacks : public TinyModule {
 public:
  std::vector<std::shared_ptr<Callback>> configure_callbacks() override {
    checkpoint = std::make_shared<NamedCheckpoint>();
    counter = std::make_shared<CountsFits>();
    return {checkpoint, counter};
  }
  std::shared_ptr<NamedCheckpoint> checkpoint;
  std::shared_ptr<CountsFits> counter;
};

TEST(ModuleHooks, ConfigureCallbacksReplacesTheTrainersOfTheSameKindAndCheckpointsLast) {
  const std::string root = (arc::testing::process_scratch() / "module_hooks").string();
  auto early = std::make_shared<EarlyStopping>(EarlyStoppingOptions("train_loss"));
  BringsCallbacks module;
  Trainer trainer(quiet().max_epochs(1).enable_checkpointing(true).default_root_dir(root), {early});
  ASSERT_EQ(trainer.callbacks().size(), 2u);  // EarlyStopping and the default ModelCheckpoint
  trainer.fit(module, tiny_data(4, 2));
  const auto& callbacks = trainer.callbacks();
  ASSERT_EQ(callbacks.size(), 3u);
  EXPECT_EQ(callbacks[0], early);
  EXPECT_EQ(callbacks[1], module.counter);
  EXPECT_EQ(callbacks[2], module.checkpoint);
  EXPECT_EQ(module.counter->fits, 1);
  EXPECT_NE(module.checkpoint->best_model_path().find("mine"), std::string::npos)
      << module.checkpoint->best_model_path();

  // The next stage asks again: the new ones replace the last ones, nothing piles up.
  trainer.fit(module, tiny_data(4, 2));
  EXPECT_EQ(trainer.callbacks().size(), 3u);
  EXPECT_EQ(module.counter->fits, 1);
  std::filesystem::remove_all(root);
}

// Every batch's path to the device, in Lightning's order, on training and evaluation batches.
class WatchesTransfers : public TinyModule {
 public:
  void on_before_batch_transfer(Batch& batch, int64_t dataloader_idx) override {
    order.push_back("before " + std::to_string(dataloader_idx));
    batch[0] = batch[0] * 0;  // what every step then sees
  }
  Batch transfer_batch_to_device(const Batch& batch, torch::Device device, int64_t dataloader_idx) override {
    order.push_back("transfer " + device.str());
    return TinyModule::transfer_batch_to_device(batch, device, dataloader_idx);
  }
  void on_after_batch_transfer(Batch& batch, int64_t) override {
    order.push_back("after");
    batch.set("on_device", torch::ones({1}));
  }
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    zeroed = zeroed && batch[0].abs().sum().item<double>() == 0 && batch.contains("on_device");
    dtype = batch[0].scalar_type();
    return TinyModule::training_step(batch, batch_idx);
  }
  void validation_step(Batch& batch, int64_t batch_idx) override {
    zeroed = zeroed && batch[0].abs().sum().item<double>() == 0 && batch.contains("on_device");
    TinyModule::validation_step(batch, batch_idx);
  }
  std::vector<std::string> order;
  bool zeroed = true;
  torch::ScalarType dtype = torch::kFloat;
};

TEST(ModuleHooks, BatchTransferHooksRunInOrderOnEveryBatch) {
  WatchesTransfers module;
  Trainer trainer(quiet().max_epochs(1).num_sanity_val_steps(0));
  trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
  ASSERT_EQ(module.order.size(), 9u);  // 2 training and 1 validation batches
  for (size_t i = 0; i < module.order.size(); i += 3) {
    EXPECT_EQ(module.order[i], "before 0");
    EXPECT_EQ(module.order[i + 1], "transfer cpu");
    EXPECT_EQ(module.order[i + 2], "after");
  }
  EXPECT_TRUE(module.zeroed);
  EXPECT_EQ(module.counts["validation_step"], 1);

  // A "-true" precision's type applies after the hooks.
  WatchesTransfers doubled;
  Trainer in_double(quiet().max_steps(1).precision("64-true"));
  in_double.fit(doubled, tiny_data(2, 2));
  EXPECT_EQ(doubled.dtype, torch::kDouble);
  EXPECT_EQ(module.dtype, torch::kFloat);
}

// training_step returns no loss on the batches listed: no backward, no step.
class Skips : public TinyModule {
 public:
  explicit Skips(std::vector<int64_t> skipped) : skipped_(std::move(skipped)) {}
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    auto loss = TinyModule::training_step(batch, batch_idx);
    if (std::find(skipped_.begin(), skipped_.end(), batch_idx) != skipped_.end()) return {};
    return loss;
  }

 private:
  std::vector<int64_t> skipped_;
};

TEST(ModuleHooks, AnUndefinedLossSkipsTheBatch) {
  Skips skipping({1, 2});
  Skips reference({});
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < skipping.parameters().size(); ++i) reference.parameters()[i].copy_(skipping.parameters()[i]);
  }
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(skipping, tiny_data(8, 2));  // 4 batches, 2 skipped
  EXPECT_EQ(skipping.counts["training_step"], 4);
  EXPECT_EQ(skipping.counts["on_before_backward"], 2);
  EXPECT_EQ(skipping.counts["on_before_optimizer_step"], 2);
  EXPECT_EQ(trainer.global_step(), 2);

  // The same as training on batches 0 and 3 alone.
  auto x = torch::arange(32, torch::kFloat).reshape({8, 4}).div(32.0);
  auto kept = torch::cat({x.slice(0, 0, 2), x.slice(0, 6, 8)});
  DataSource only_kept{std::make_shared<TensorDataset>(std::vector<torch::Tensor>{kept, kept.sum(1, true) * 2 - 1}),
                       DataLoaderOptions(2)};
  Trainer b(quiet().max_epochs(1));
  b.fit(reference, only_kept);
  EXPECT_TRUE(torch::equal(skipping.linear->weight, reference.linear->weight));
  EXPECT_TRUE(torch::equal(skipping.linear->bias, reference.linear->bias));

  // A non-scalar loss is still an error.
  class ReturnsAVector : public TinyModule {
   public:
    torch::Tensor training_step(Batch&, int64_t) override { return torch::ones({3}, torch::requires_grad()); }
  } vector;
  const auto message = error_of([&] { Trainer(quiet().max_steps(1)).fit(vector, tiny_data(2, 2)); });
  EXPECT_NE(message.find("got a tensor of shape [3]"), std::string::npos) << message;
}

// Layers built in configure_model, as Lightning's: none exist when the module is made; fit
// builds them after setup (so the optimizer gets them), later stages find them there, and
// load_from_checkpoint builds them before it loads the weights into them.
class BuiltLate : public TrainModule {
 public:
  BuiltLate() : TrainModule("BuiltLate") {}
  explicit BuiltLate(const nlohmann::json&) : BuiltLate() {}
  void setup(Stage) override { order.push_back("setup"); }
  void configure_model() override {
    order.push_back("configure_model");
    if (!linear) linear = register_module("linear", torch::nn::Linear(4, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override { return torch::mse_loss(linear(batch[0]), batch[1]); }
  void validation_step(Batch& batch, int64_t) override { log("val_loss", torch::mse_loss(linear(batch[0]), batch[1])); }
  std::vector<OptimizerConfig> configure_optimizers() override {
    order.push_back("configure_optimizers");
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1))};
  }
  torch::nn::Linear linear{nullptr};
  std::vector<std::string> order;
};

TEST(ModuleHooks, ConfigureModelBuildsLayersAfterSetupOncePerModule) {
  const auto dir = testing::fresh_folder("configure_model");
  BuiltLate module;
  EXPECT_TRUE(module.parameters().empty());
  Trainer trainer(quiet().max_epochs(2).default_root_dir(dir).enable_checkpointing(true));
  trainer.fit(module, tiny_data(16, 4), tiny_data(8, 4));
  ASSERT_TRUE(module.linear);
  const auto order = module.order;
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 3),
            (std::vector<std::string>{"setup", "configure_model", "configure_optimizers"}));
  const auto trained = module.linear->weight.clone();
  const auto* layer = module.linear.get();
  trainer.validate(module, tiny_data(8, 4));
  EXPECT_EQ(module.linear.get(), layer) << "a second stage keeps the layers configure_model built";
  std::string checkpoint;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.path().extension() == ".ckpt") checkpoint = entry.path().string();
  ASSERT_FALSE(checkpoint.empty());
  const auto loaded = load_from_checkpoint<BuiltLate>(checkpoint);
  ASSERT_TRUE(loaded->linear);
  EXPECT_TRUE(torch::equal(loaded->linear->weight, trained));
  std::filesystem::remove_all(dir);
}

// Predict's hooks, the module's after each callback's, as Lightning orders them.
class RecordsPredict : public TinyModule {
 public:
  void on_predict_start() override { order.push_back("start"); }
  void on_predict_epoch_start() override { order.push_back("epoch_start"); }
  void on_predict_batch_start(Batch&, int64_t batch_idx) override {
    order.push_back("batch_start " + std::to_string(batch_idx));
  }
  void on_predict_batch_end(const torch::Tensor& outputs, Batch&, int64_t batch_idx) override {
    order.push_back("batch_end " + std::to_string(batch_idx) + " of " + std::to_string(outputs.size(0)));
  }
  void on_predict_epoch_end() override { order.push_back("epoch_end"); }
  void on_predict_end() override { order.push_back("end"); }
  std::vector<std::string> order;
};

TEST(ModuleHooks, PredictHooksRunAroundEveryBatchAfterTheCallbacks) {
  RecordsPredict module;
  auto callback = std::make_shared<LambdaCallback>();
  callback->predict_epoch_start = [&](Trainer&, TrainModule&) { module.order.push_back("callback epoch_start"); };
  callback->predict_batch_start = [&](Trainer&, TrainModule&, Batch&, int64_t i) {
    module.order.push_back("callback batch_start " + std::to_string(i));
  };
  Trainer trainer(quiet(), {callback});
  trainer.predict(module, tiny_data(6, 4));
  EXPECT_EQ(module.order,
            (std::vector<std::string>{"start", "callback epoch_start", "epoch_start", "callback batch_start 0",
                                      "batch_start 0", "batch_end 0 of 4", "callback batch_start 1", "batch_start 1",
                                      "batch_end 1 of 2", "epoch_end", "end"}));
}

// on_validation_model_eval and the others put the module in evaluation mode, and back: one that
// keeps dropout on validates in training mode; fit goes on training either way.
class KeepsDropout : public TinyModule {
 public:
  explicit KeepsDropout(bool keep) : keep_(keep) {}
  void on_validation_model_eval() override {
    if (!keep_) TinyModule::on_validation_model_eval();
  }
  void on_validation_model_train() override {
    ++trained_back;
    TinyModule::on_validation_model_train();
  }
  void validation_step(Batch& batch, int64_t batch_idx) override {
    modes.push_back(is_training());
    TinyModule::validation_step(batch, batch_idx);
  }
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    EXPECT_TRUE(is_training());
    return TinyModule::training_step(batch, batch_idx);
  }
  std::vector<bool> modes;
  int trained_back = 0;

 private:
  bool keep_;
};

TEST(ModuleHooks, ModelEvalHooksDecideTheModeOfEvaluation) {
  for (const bool keep : {false, true}) {
    KeepsDropout module(keep);
    Trainer trainer(quiet().max_epochs(2).num_sanity_val_steps(0));
    trainer.fit(module, tiny_data(8, 4), tiny_data(8, 4));
    ASSERT_EQ(module.modes.size(), 4u);
    for (const bool training : module.modes) EXPECT_EQ(training, keep);
    EXPECT_EQ(module.trained_back, 2) << "each of fit's validations puts the module back to training";
    module.modes.clear();
    module.eval();
    trainer.validate(module, tiny_data(8, 4));
    EXPECT_EQ(module.trained_back, 2) << "validate found it in evaluation mode and leaves it so";
    EXPECT_FALSE(module.is_training());
  }
}

}  // namespace
}  // namespace arc
