// arc::Fabric in one process: precision in a hand-written loop, against the Trainer; saving
// and loading a loop's state.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <arc/base/detail/torch_compat.h>
#include <arc/fabric/fabric.h>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace arc {
namespace {

using namespace testing;

FabricOptions one_thread() { return FabricOptions().num_threads(1); }

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

TEST(Fabric, HandWrittenLoopUnderBf16MixedEndsLikeTheTrainer) {
  Regression by_trainer;
  Regression by_hand;
  {
    torch::NoGradGuard no_grad;
    by_hand.linear->weight.copy_(by_trainer.linear->weight);
    by_hand.linear->bias.copy_(by_trainer.linear->bias);
  }
  Trainer(quiet().max_epochs(3).precision("bf16-mixed")).fit(by_trainer, tiny_data(16, 4));

  Fabric fabric(one_thread().precision("bf16-mixed"));
  fabric.prepare(by_hand);
  torch::optim::SGD sgd(by_hand.parameters(), torch::optim::SGDOptions(0.1));
  fabric.prepare(sgd);
  auto loader = fabric.prepare(tiny_data(16, 4));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader->set_epoch(epoch);
    loader->start();
    while (auto batch = loader->next()) {
      sgd.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = fabric.autocast();
        loss = by_hand.loss(fabric.prepare_batch(*batch));
      }
      fabric.backward(loss);
      EXPECT_TRUE(fabric.step(sgd));
    }
  }
  EXPECT_EQ(by_hand.output_type, torch::kBFloat16);
  EXPECT_EQ(by_hand.linear->weight.scalar_type(), torch::kFloat);
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU)) << "autocast ends with its guard";
  EXPECT_TRUE(torch::equal(by_hand.linear->weight, by_trainer.linear->weight));
  EXPECT_TRUE(torch::equal(by_hand.linear->bias, by_trainer.linear->bias));
  // Outside the guard the same forward runs in float.
  by_hand.loss(fabric.prepare_batch(Batch({torch::ones({2, 4}), torch::zeros({2, 1})})));
  EXPECT_EQ(by_hand.output_type, torch::kFloat);
}

TEST(Fabric, TruePrecisionCastsModelAndFloatingInputs) {
  Fabric fabric(one_thread().precision("64-true"));
  Regression module;
  fabric.prepare(module);
  EXPECT_EQ(module.linear->weight.scalar_type(), torch::kDouble);
  const Batch batch({torch::ones({2, 4}), torch::zeros({2}, torch::kLong)});
  const auto moved = fabric.prepare_batch(batch);
  EXPECT_EQ(moved[0].scalar_type(), torch::kDouble);
  EXPECT_EQ(moved[1].scalar_type(), torch::kLong) << "labels keep their type";
  EXPECT_EQ(fabric.precision(), "64-true");
}

TEST(Fabric, PrecisionNamesFollowTheTrainer) {
  EXPECT_EQ(Fabric(one_thread().precision("16-mixed")).precision(), "bf16-mixed") << "16-mixed needs CUDA";
  EXPECT_EQ(Fabric(one_thread()).precision(), "32-true");
  const auto message = error_of([] { Fabric fabric(one_thread().precision("fp8")); });
  EXPECT_NE(message.find("unknown precision 'fp8'"), std::string::npos) << message;
}

// One process: reduce_buffer is a zeroed tensor on the rank's device, all_reduce_ leaves a tensor as
// it is (the mean of one), and a negative size is an error that names it.
TEST(Fabric, ReduceBufferAndInPlaceAllReduceInOneProcess) {
  Fabric fabric(one_thread());
  auto buffer = fabric.reduce_buffer({2, 3}, torch::kDouble);
  EXPECT_EQ(buffer.sizes(), torch::IntArrayRef({2, 3}));
  EXPECT_EQ(buffer.scalar_type(), torch::kDouble);
  EXPECT_EQ(buffer.device(), fabric.device());
  EXPECT_TRUE(torch::equal(buffer, torch::zeros({2, 3}, torch::kDouble)));
  buffer.fill_(2.5);
  fabric.all_reduce_(buffer);
  EXPECT_TRUE(torch::equal(buffer, torch::full({2, 3}, 2.5, torch::kDouble)));
  const auto message = error_of([&] { fabric.reduce_buffer({4, -1}); });
  EXPECT_NE(message.find("reduce_buffer: size -1 in [4, -1] is negative"), std::string::npos) << message;
}

// `steps` Adam steps of a hand-written loop over 16 samples in batches of 4, from `from` (the steps
// before it: the loader starts at that batch of its epoch).
void train(Fabric& fabric, Regression& module, torch::optim::Optimizer& adam, int64_t from, int64_t to) {
  auto loader = fabric.prepare(DataSource(tiny_data(16, 4).dataset, DataLoaderOptions(4).shuffle(true)));
  for (int64_t step = from; step < to;) {
    loader->set_epoch(step / 4);
    loader->start(step % 4);
    while (step < to) {
      auto batch = loader->next();
      if (!batch) break;
      adam.zero_grad();
      fabric.backward(module.loss(fabric.prepare_batch(*batch)));
      fabric.step(adam);
      ++step;
    }
  }
}

// Fabric's save and load: a loop stopped after 5 steps, saved, and loaded into a new model and
// optimizer (other initial weights, no Adam moments yet) ends as the loop that never stopped.
TEST(Fabric, SaveAndLoadResumeAHandWrittenLoopExactly) {
  Fabric fabric(one_thread().seed(7));
  torch::manual_seed(1);
  Regression whole, first;
  {
    torch::NoGradGuard no_grad;
    first.linear->weight.copy_(whole.linear->weight);
    first.linear->bias.copy_(whole.linear->bias);
  }
  torch::optim::Adam whole_adam(whole.parameters(), torch::optim::AdamOptions(0.05));
  train(fabric, whole, whole_adam, 0, 10);

  const auto path = (process_scratch() / "loop" / "state.ckpt").string();  // its folder is made
  torch::optim::Adam first_adam(first.parameters(), torch::optim::AdamOptions(0.05));
  train(fabric, first, first_adam, 0, 5);
  FabricState saved;
  saved.add("model", first).add("optimizer", first_adam);
  saved.values["step"] = 5;
  fabric.save(path, saved);

  Regression resumed;
  torch::optim::Adam resumed_adam(resumed.parameters(), torch::optim::AdamOptions(0.05));
  FabricState state;
  state.add("model", resumed).add("optimizer", resumed_adam);
  const auto unmatched = fabric.load(path, state);
  EXPECT_TRUE(unmatched.missing_keys.empty() && unmatched.unexpected_keys.empty());
  ASSERT_EQ(state.values.at("step"), 5);
  train(fabric, resumed, resumed_adam, 5, 10);
  EXPECT_TRUE(torch::equal(resumed.linear->weight, whole.linear->weight));
  EXPECT_TRUE(torch::equal(resumed.linear->bias, whole.linear->bias));
}

TEST(Fabric, LoadSaysWhatTheFileLacksAndSkipsItWhenNotStrict) {
  Fabric fabric(one_thread());
  Regression module;
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1));
  const auto path = (process_scratch() / "partial.ckpt").string();
  FabricState saved;
  saved.add("model", module);
  fabric.save(path, saved);

  FabricState wider;
  wider.add("model", module).add("optimizer", sgd);
  wider.values["kept"] = true;
  auto message = error_of([&] { fabric.load(path, wider); });
  EXPECT_NE(message.find("checkpoint '" + path + "' holds no optimizer; it holds model"), std::string::npos) << message;
  EXPECT_NE(message.find("strict=false"), std::string::npos) << message;
  const auto unmatched = fabric.load(path, wider, false);
  EXPECT_EQ(unmatched.missing_keys, std::vector<std::string>{"optimizer"});
  EXPECT_EQ(wider.values, nlohmann::json::object()) << "values are the file's";

  struct Narrower : torch::nn::Module {
    Narrower() { register_module("linear", torch::nn::Linear(3, 1)); }
  } narrower;
  FabricState mismatched;
  mismatched.add("model", narrower);
  message = error_of([&] { fabric.load(path, mismatched); });
  EXPECT_NE(message.find("'linear.weight' has shape [1,4], the module has [1,3]"), std::string::npos) << message;

  message = error_of([&] { fabric.save("/proc/arc/state.ckpt", saved); });
  EXPECT_NE(message.find("/proc/arc"), std::string::npos) << message;
  message = error_of([&] { fabric.load(path + ".missing", wider); });
  EXPECT_NE(message.find(path + ".missing"), std::string::npos) << message;
  message = error_of([&] { FabricState().add("a/b", module); });
  EXPECT_NE(message.find("without '/'"), std::string::npos) << message;
  message = error_of([&] { FabricState().add("model", module).add("model", sgd); });
  EXPECT_NE(message.find("already holds 'model'"), std::string::npos) << message;
}

// A Trainer's checkpoint holds its module as "model" and its optimizers as "optimizer_N".
TEST(Fabric, LoadsATrainersCheckpoint) {
  TinyModule trained;
  Trainer trainer(quiet().max_steps(3));
  trainer.fit(trained, tiny_data(8, 2));
  const auto path = (process_scratch() / "trainer.ckpt").string();
  trainer.save_checkpoint(path);

  Fabric fabric(one_thread());
  TinyModule module;
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1));
  FabricState state;
  state.add("model", module).add("optimizer_0", sgd);
  fabric.load(path, state);
  EXPECT_TRUE(torch::equal(module.linear->weight, trained.linear->weight));
  EXPECT_TRUE(state.values.empty());
}

TEST(Fabric, ClipGradientsByNormOrByValue) {
  Fabric fabric(one_thread());
  Regression module;
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1));
  const auto gradients = [&](double value) {
    for (auto& p : module.parameters()) p.mutable_grad() = torch::full_like(p, value);
  };
  const auto total_norm = [&] {
    double squares = 0;
    for (auto& p : module.parameters()) squares += p.grad().pow(2).sum().item<double>();
    return std::sqrt(squares);
  };
  gradients(3);  // 5 values: norm 3 * sqrt(5)
  const auto norm = fabric.clip_gradients(sgd, 1.0);
  ASSERT_TRUE(norm.has_value());
  EXPECT_NEAR(*norm, 3 * std::sqrt(5.0), 1e-5);
  EXPECT_NEAR(total_norm(), 1.0, 1e-5);
  gradients(-3);
  EXPECT_FALSE(fabric.clip_gradients(sgd, 0.5, "value").has_value());
  EXPECT_TRUE(torch::equal(module.linear->weight.grad(), torch::full({1, 4}, -0.5)));
  const auto message = error_of([&] { fabric.clip_gradients(sgd, 1.0, "max"); });
  EXPECT_NE(message.find("the algorithm \"max\" (gradient_clip_algorithm, or Fabric::clip_gradients' algorithm) "
                         "is unknown; use \"norm\""),
            std::string::npos)
      << message;
  const auto negative = error_of([&] { fabric.clip_gradients(sgd, -1.0); });
  EXPECT_NE(negative.find("the clip value -1 (gradient_clip_val, or Fabric::clip_gradients' clip_val) is "
                          "negative; give a value >= 0"),
            std::string::npos)
      << negative;
}

// Fabric's callbacks: call runs a hook on every callback of its class (a subclass's too), in the
// order given, and leaves the other callbacks out.
struct EpochHooks : FabricCallback {
  explicit EpochHooks(std::string name, std::vector<std::string>& calls) : name(std::move(name)), calls(calls) {}
  virtual void on_epoch_end(int64_t epoch, double loss) {
    calls.push_back(name + " " + std::to_string(epoch) + " " + std::to_string(loss));
  }
  std::string name;
  std::vector<std::string>& calls;
};
struct LouderEpochHooks : EpochHooks {
  using EpochHooks::EpochHooks;
  void on_epoch_end(int64_t epoch, double loss) override { EpochHooks::on_epoch_end(epoch * 10, loss); }
};
struct OtherHooks : FabricCallback {
  void on_save() { ++saves; }
  int saves = 0;
};

TEST(Fabric, CallRunsAHookOnEveryCallbackOfItsClass) {
  std::vector<std::string> calls;
  auto other = std::make_shared<OtherHooks>();
  Fabric fabric(one_thread().callbacks(
      {std::make_shared<EpochHooks>("first", calls), other, std::make_shared<LouderEpochHooks>("second", calls)}));
  fabric.call(&EpochHooks::on_epoch_end, 2, 0.5);
  EXPECT_EQ(calls, (std::vector<std::string>{"first 2 0.500000", "second 20 0.500000"}));
  EXPECT_EQ(other->saves, 0);
  fabric.call(&OtherHooks::on_save);
  EXPECT_EQ(other->saves, 1);
  EXPECT_EQ(calls.size(), 2u);
  const auto message = error_of([] { Fabric(one_thread().callbacks({nullptr})); });
  EXPECT_NE(message.find("callbacks holds a null callback"), std::string::npos) << message;
}

// Fabric's loggers: log and log_dict at the step given, the hyper-parameters, and the last records
// written when the Fabric ends.
TEST(Fabric, LoggersGetWhatTheLoopLogs) {
  const auto dir = process_scratch() / "accelerator_logs";
  {
    Fabric fabric(one_thread().loggers({std::make_shared<CSVLogger>(dir.string())}));
    fabric.log_hyperparams({{"lr", 0.1}});
    for (int64_t step = 0; step < 3; ++step) fabric.log("loss", 1.0 / static_cast<double>(step + 1), step);
    fabric.log_dict({{"loss", 0.25}, {"accuracy", 0.5}}, 3);
    EXPECT_EQ(fabric.loggers().front()->version(), "version_0");
  }
  std::ifstream csv(dir / "lightning_logs" / "version_0" / "metrics.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  EXPECT_EQ(lines, (std::vector<std::string>{"accuracy,loss,step", ",1,0", ",0.5,1", ",0.3333333333,2", "0.5,0.25,3"}));
  std::ifstream hparams(dir / "lightning_logs" / "version_0" / "hparams.yaml");
  std::string first;
  std::getline(hparams, first);
  EXPECT_EQ(first, "lr: 0.1");
}

// A Fabric's checkpoint has no Trainer state to resume, but its "model" evaluates.
TEST(Fabric, ATrainerEvaluatesButDoesNotResumeAFabricsCheckpoint) {
  Fabric fabric(one_thread());
  TinyModule saved;
  const auto path = (process_scratch() / "fabric.ckpt").string();
  fabric.save(path, FabricState().add("model", saved));
  TinyModule module;
  const auto message = error_of([&] { Trainer(quiet().max_steps(1)).fit(module, tiny_data(4, 2), {}, path); });
  EXPECT_NE(message.find("was written by Fabric::save"), std::string::npos) << message;
  Trainer(quiet()).validate(module, tiny_data(4, 2), path, false);
  EXPECT_TRUE(torch::equal(module.linear->weight, saved.linear->weight));
}

}  // namespace
}  // namespace arc
