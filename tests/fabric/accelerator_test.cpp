// arc::Accelerator in one process: precision in a hand-written loop, against the Trainer; saving
// and loading a loop's state.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <arc/base/torch_compat.h>
#include <arc/fabric/accelerator.h>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

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

// One process: reduce_buffer is a zeroed tensor on the rank's device, all_reduce_ leaves a tensor as
// it is (the mean of one), and a negative size is an error that names it.
TEST(Accelerator, ReduceBufferAndInPlaceAllReduceInOneProcess) {
  Accelerator accelerator(quiet());
  auto buffer = accelerator.reduce_buffer({2, 3}, torch::kDouble);
  EXPECT_EQ(buffer.sizes(), torch::IntArrayRef({2, 3}));
  EXPECT_EQ(buffer.scalar_type(), torch::kDouble);
  EXPECT_EQ(buffer.device(), accelerator.device());
  EXPECT_TRUE(torch::equal(buffer, torch::zeros({2, 3}, torch::kDouble)));
  buffer.fill_(2.5);
  accelerator.all_reduce_(buffer);
  EXPECT_TRUE(torch::equal(buffer, torch::full({2, 3}, 2.5, torch::kDouble)));
  const auto message = error_of([&] { accelerator.reduce_buffer({4, -1}); });
  EXPECT_NE(message.find("reduce_buffer: size -1 in [4, -1] is negative"), std::string::npos) << message;
}

// `steps` Adam steps of a hand-written loop over 16 samples in batches of 4, from `from` (the steps
// before it: the loader starts at that batch of its epoch).
void train(Accelerator& accelerator, Regression& module, torch::optim::Optimizer& adam, int64_t from, int64_t to) {
  auto loader = accelerator.prepare(DataSource(tiny_data(16, 4).dataset, DataLoaderOptions(4).shuffle(true)));
  for (int64_t step = from; step < to;) {
    loader->set_epoch(step / 4);
    loader->start(step % 4);
    while (step < to) {
      auto batch = loader->next();
      if (!batch) break;
      adam.zero_grad();
      accelerator.backward(module.loss(accelerator.prepare_batch(*batch)));
      accelerator.step(adam);
      ++step;
    }
  }
}

// Fabric's save and load: a loop stopped after 5 steps, saved, and loaded into a new model and
// optimizer (other initial weights, no Adam moments yet) ends as the loop that never stopped.
TEST(Accelerator, SaveAndLoadResumeAHandWrittenLoopExactly) {
  Accelerator accelerator(quiet().seed(7));
  torch::manual_seed(1);
  Regression whole, first;
  {
    torch::NoGradGuard no_grad;
    first.linear->weight.copy_(whole.linear->weight);
    first.linear->bias.copy_(whole.linear->bias);
  }
  torch::optim::Adam whole_adam(whole.parameters(), torch::optim::AdamOptions(0.05));
  train(accelerator, whole, whole_adam, 0, 10);

  const auto path = (process_scratch() / "loop" / "state.ckpt").string();  // its folder is made
  torch::optim::Adam first_adam(first.parameters(), torch::optim::AdamOptions(0.05));
  train(accelerator, first, first_adam, 0, 5);
  AcceleratorState saved;
  saved.add("model", first).add("optimizer", first_adam);
  saved.values["step"] = 5;
  accelerator.save(path, saved);

  Regression resumed;
  torch::optim::Adam resumed_adam(resumed.parameters(), torch::optim::AdamOptions(0.05));
  AcceleratorState state;
  state.add("model", resumed).add("optimizer", resumed_adam);
  const auto unmatched = accelerator.load(path, state);
  EXPECT_TRUE(unmatched.missing_keys.empty() && unmatched.unexpected_keys.empty());
  ASSERT_EQ(state.values.at("step"), 5);
  train(accelerator, resumed, resumed_adam, 5, 10);
  EXPECT_TRUE(torch::equal(resumed.linear->weight, whole.linear->weight));
  EXPECT_TRUE(torch::equal(resumed.linear->bias, whole.linear->bias));
}

TEST(Accelerator, LoadSaysWhatTheFileLacksAndSkipsItWhenNotStrict) {
  Accelerator accelerator(quiet());
  Regression module;
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1));
  const auto path = (process_scratch() / "partial.ckpt").string();
  AcceleratorState saved;
  saved.add("model", module);
  accelerator.save(path, saved);

  AcceleratorState wider;
  wider.add("model", module).add("optimizer", sgd);
  wider.values["kept"] = true;
  auto message = error_of([&] { accelerator.load(path, wider); });
  EXPECT_NE(message.find("checkpoint '" + path + "' holds no optimizer; it holds model"), std::string::npos) << message;
  EXPECT_NE(message.find("strict=false"), std::string::npos) << message;
  const auto unmatched = accelerator.load(path, wider, false);
  EXPECT_EQ(unmatched.missing_keys, std::vector<std::string>{"optimizer"});
  EXPECT_EQ(wider.values, nlohmann::json::object()) << "values are the file's";

  struct Narrower : torch::nn::Module {
    Narrower() { register_module("linear", torch::nn::Linear(3, 1)); }
  } narrower;
  AcceleratorState mismatched;
  mismatched.add("model", narrower);
  message = error_of([&] { accelerator.load(path, mismatched); });
  EXPECT_NE(message.find("'linear.weight' has shape [1,4], the module has [1,3]"), std::string::npos) << message;

  message = error_of([&] { accelerator.save("/proc/arc/state.ckpt", saved); });
  EXPECT_NE(message.find("/proc/arc"), std::string::npos) << message;
  message = error_of([&] { accelerator.load(path + ".missing", wider); });
  EXPECT_NE(message.find(path + ".missing"), std::string::npos) << message;
  message = error_of([&] { AcceleratorState().add("a/b", module); });
  EXPECT_NE(message.find("without '/'"), std::string::npos) << message;
  message = error_of([&] { AcceleratorState().add("model", module).add("model", sgd); });
  EXPECT_NE(message.find("already holds 'model'"), std::string::npos) << message;
}

// A Trainer's checkpoint holds its module as "model" and its optimizers as "optimizer_N".
TEST(Accelerator, LoadsATrainersCheckpoint) {
  TinyModule trained;
  Trainer trainer(quiet().max_steps(3));
  trainer.fit(trained, tiny_data(8, 2));
  const auto path = (process_scratch() / "trainer.ckpt").string();
  trainer.save_checkpoint(path);

  Accelerator accelerator(quiet());
  TinyModule module;
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(0.1));
  AcceleratorState state;
  state.add("model", module).add("optimizer_0", sgd);
  accelerator.load(path, state);
  EXPECT_TRUE(torch::equal(module.linear->weight, trained.linear->weight));
  EXPECT_TRUE(state.values.empty());
}

TEST(Accelerator, ClipGradientsByNormOrByValue) {
  Accelerator accelerator(quiet());
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
  const auto norm = accelerator.clip_gradients(sgd, 1.0);
  ASSERT_TRUE(norm.has_value());
  EXPECT_NEAR(*norm, 3 * std::sqrt(5.0), 1e-5);
  EXPECT_NEAR(total_norm(), 1.0, 1e-5);
  gradients(-3);
  EXPECT_FALSE(accelerator.clip_gradients(sgd, 0.5, "value").has_value());
  EXPECT_TRUE(torch::equal(module.linear->weight.grad(), torch::full({1, 4}, -0.5)));
  const auto message = error_of([&] { accelerator.clip_gradients(sgd, 1.0, "max"); });
  EXPECT_NE(message.find("the algorithm \"max\" (gradient_clip_algorithm, or Accelerator::clip_gradients' algorithm) "
                         "is unknown; use \"norm\""),
            std::string::npos)
      << message;
  const auto negative = error_of([&] { accelerator.clip_gradients(sgd, -1.0); });
  EXPECT_NE(negative.find("the clip value -1 (gradient_clip_val, or Accelerator::clip_gradients' clip_val) is "
                          "negative; give a value >= 0"),
            std::string::npos)
      << negative;
}

// Fabric's loggers: log and log_dict at the step given, the hyper-parameters, and the last records
// written when the Accelerator ends.
TEST(Accelerator, LoggersGetWhatTheLoopLogs) {
  const auto dir = process_scratch() / "accelerator_logs";
  {
    Accelerator accelerator(quiet(), {std::make_shared<CSVLogger>(dir.string())});
    accelerator.log_hyperparams({{"lr", 0.1}});
    for (int64_t step = 0; step < 3; ++step) accelerator.log("loss", 1.0 / static_cast<double>(step + 1), step);
    accelerator.log_dict({{"loss", 0.25}, {"accuracy", 0.5}}, 3);
    EXPECT_EQ(accelerator.loggers().front()->version(), "version_0");
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

// An Accelerator's checkpoint has no Trainer state to resume, but its "model" evaluates.
TEST(Accelerator, ATrainerEvaluatesButDoesNotResumeAnAcceleratorsCheckpoint) {
  Accelerator accelerator(quiet());
  TinyModule saved;
  const auto path = (process_scratch() / "accelerator.ckpt").string();
  accelerator.save(path, AcceleratorState().add("model", saved));
  TinyModule module;
  const auto message = error_of([&] { Trainer(quiet().max_steps(1)).fit(module, tiny_data(4, 2), {}, path); });
  EXPECT_NE(message.find("was written by Accelerator::save"), std::string::npos) << message;
  Trainer(quiet()).validate(module, tiny_data(4, 2), path, false);
  EXPECT_TRUE(torch::equal(module.linear->weight, saved.linear->weight));
}

}  // namespace
}  // namespace arc
