// WeightAveraging, EMAWeightAveraging and StochasticWeightAveraging (issue 18, row 4): the averages
// follow their formulas, validation in fit sees them and fit ends with them; SWA anneals the rate and
// recomputes BatchNorm statistics. Checkpoints and resume: checkpoint_test.cpp.
#include "support/errors.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

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

// Notes each batch's learning rate and the weights at every epoch's end.
class SwaWatched : public testing::TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    rates.push_back(trainer().optimizer_configs().front().optimizer->param_groups()[0].options().get_lr());
    return TinyModule::training_step(batch, batch_idx);
  }
  void on_train_epoch_end() override { epoch_ends.push_back(linear->weight.detach().clone()); }
  std::vector<double> rates;
  std::vector<torch::Tensor> epoch_ends;
};

// As torch's SWALR under Lightning's callback: epoch 3 (index 2) starts averaging at the module's
// rate 0.1, which then anneals to 0.02 over 4 epochs along a half cosine; the average is the mean of
// the weights at the ends of epochs 2, 3 and 4, which fit ends with.
TEST(StochasticWeightAveraging, AnnealsTheRateAndAveragesFromItsEpoch) {
  SwaWatched module;
  auto swa = std::make_shared<StochasticWeightAveraging>(std::vector<double>{0.02}, 3, 4, "cos");
  Trainer(testing::quiet().max_epochs(5), {swa}).fit(module, testing::tiny_data(8, 2));
  EXPECT_EQ(swa->swa_start(), 2);
  EXPECT_EQ(swa->updates(), 3);
  ASSERT_EQ(module.rates.size(), 20u);  // 4 batches per epoch
  const auto anneal = [](double t) { return 0.02 * (1 - std::cos(M_PI * t)) / 2 + 0.1 * (1 + std::cos(M_PI * t)) / 2; };
  const std::vector<double> per_epoch = {0.1, 0.1, 0.1, anneal(0.25), anneal(0.5)};
  for (size_t batch = 0; batch < module.rates.size(); ++batch)
    EXPECT_NEAR(module.rates[batch], per_epoch[batch / 4], 1e-12) << "batch " << batch;
  const auto expected = (module.epoch_ends[2] + module.epoch_ends[3] + module.epoch_ends[4]) / 3;
  EXPECT_TRUE(torch::allclose(module.linear->weight, expected, 1e-6, 1e-7));
  EXPECT_FALSE(torch::allclose(module.epoch_ends[4], expected, 1e-6, 1e-7));
}

// Lightning's printed init_args: avg_fn null and device (the CPU by default, null beside the
// module); what a config cannot mean is an error naming the key.
TEST(StochasticWeightAveraging, TakesLightningsDeviceAndNullAvgFnFromAConfig) {
  const auto swa = [](const nlohmann::json& init_args) {
    return callbacks_from_json(
        {{"class_path", "lightning.pytorch.callbacks.StochasticWeightAveraging"}, {"init_args", init_args}},
        "trainer.callbacks");
  };
  EXPECT_EQ(swa({{"swa_lrs", 0.01},
                 {"swa_epoch_start", 0.8},
                 {"annealing_epochs", 10},
                 {"annealing_strategy", "cos"},
                 {"avg_fn", nullptr},
                 {"device", "cpu"}})
                .size(),
            1u);
  EXPECT_EQ(swa({{"swa_lrs", 0.01}, {"device", nullptr}}).size(), 1u);
  const auto named = testing::error_of([&] { swa({{"swa_lrs", 0.01}, {"device", "gpu"}}); });
  EXPECT_NE(named.find("'trainer.callbacks.init_args.device' is \"gpu\", which is not a device"), std::string::npos)
      << named;
  const auto function = testing::error_of([&] { swa({{"swa_lrs", 0.01}, {"avg_fn", "swa_utils.get_ema_avg_fn"}}); });
  EXPECT_NE(function.find("'trainer.callbacks.init_args.avg_fn' is \"swa_utils.get_ema_avg_fn\"; a config cannot "
                          "hold a function"),
            std::string::npos)
      << function;
  if (!torch::cuda::is_available()) {
    const auto no_gpu = testing::error_of([&] { swa({{"swa_lrs", 0.01}, {"device", "cuda"}}); });
    EXPECT_NE(no_gpu.find("init_args.device (lightning.pytorch.callbacks.StochasticWeightAveraging): the averaged "
                          "weights' device is cuda, but "
                          "LibTorch sees no GPU here"),
              std::string::npos)
        << no_gpu;
  }
}

// On a GPU, Lightning's default keeps the average on the CPU: the same weights as an average kept
// beside the module's, without its GPU memory.
TEST(StochasticWeightAveraging, KeepsTheAverageOnTheCpuWhileTheModuleTrainsOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto fit = [](std::optional<torch::Device> device) {
    torch::manual_seed(0);  // both fits start from the same weights
    SwaWatched module;
    auto swa = std::make_shared<StochasticWeightAveraging>(std::vector<double>{0.02}, 2, 1, "cos", device);
    Trainer(testing::quiet().accelerator("gpu").devices(Devices::of_count(1)).max_epochs(3), {swa})
        .fit(module, testing::tiny_data(8, 2));
    EXPECT_EQ(swa->averaged().front().device().type(), device ? device->type() : torch::kCUDA);
    EXPECT_TRUE(module.linear->weight.is_cuda());
    return module.linear->weight.detach().cpu();
  };
  EXPECT_TRUE(torch::allclose(fit(torch::Device(torch::kCPU)), fit(std::nullopt), 1e-6, 1e-7));
}

TEST(StochasticWeightAveraging, AFractionStartsAtThatShareOfMaxEpochs) {
  SwaWatched module;
  auto swa = std::make_shared<StochasticWeightAveraging>(std::vector<double>{0.05}, 0.5, 0, "linear");
  Trainer(testing::quiet().max_epochs(4), {swa}).fit(module, testing::tiny_data(4, 2));
  EXPECT_EQ(swa->swa_start(), 1);  // int(4 * 0.5) = 2, the second epoch
  EXPECT_EQ(swa->updates(), 3);
  EXPECT_EQ(module.rates, (std::vector<double>{0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05}));
  for (const auto& make : std::vector<std::function<void()>>{
           [] { StochasticWeightAveraging({}); }, [] { StochasticWeightAveraging({0.1}, 1.5); },
           [] { StochasticWeightAveraging({0.1}, 0.8, -1); },
           [] { StochasticWeightAveraging({0.1}, 0.8, 10, "cubic"); }})
    EXPECT_NE(testing::error_of(make).find("StochasticWeightAveraging: "), std::string::npos);
}

// Linear(4, 8) -> BatchNorm1d(8) -> Linear(8, 1).
class Normed : public testing::TinyModule {
 public:
  Normed() {
    fc = register_module("fc", torch::nn::Linear(4, 8));
    norm = register_module("norm", torch::nn::BatchNorm1d(8));
    out = register_module("out", torch::nn::Linear(8, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    return torch::mse_loss(out(norm(fc(batch[0]))), batch[1]);
  }
  torch::nn::Linear fc{nullptr}, out{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};

// After fit the BatchNorm statistics are those of the averaged weights: the mean over the training
// batches of each batch's mean and unbiased variance of the layer's input, momentum as it was.
TEST(StochasticWeightAveraging, RecomputesBatchNormStatisticsForTheAverage) {
  Normed module;
  auto swa = std::make_shared<StochasticWeightAveraging>(std::vector<double>{0.05}, 2);
  const auto data = testing::tiny_data(12, 4);
  Trainer(testing::quiet().max_epochs(3), {swa}).fit(module, data);
  torch::NoGradGuard no_grad;
  auto mean = torch::zeros({8}), var = torch::zeros({8});
  for (int64_t begin = 0; begin < 12; begin += 4) {
    const auto inputs = module.fc(data.dataset->get_batch({begin, begin + 1, begin + 2, begin + 3})[0]);
    mean += inputs.mean(0) / 3;
    var += inputs.var(0, /*unbiased=*/true) / 3;
  }
  EXPECT_TRUE(torch::allclose(module.norm->running_mean, mean, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(module.norm->running_var, var, 1e-5, 1e-6));
  EXPECT_EQ(module.norm->num_batches_tracked.item<int64_t>(), 3);
  EXPECT_EQ(module.norm->options.momentum(), 0.1);
}

// Lightning's WeightAveraging and EMAWeightAveraging arguments from a config: use_buffers leaves
// BatchNorm's statistics out of the average, device says where it is kept.
TEST(WeightAveraging, TakesLightningsUseBuffersAndDeviceFromAConfig) {
  const auto averaging = [](const std::string& name, const nlohmann::json& init_args) {
    auto built = callbacks_from_json({{"class_path", name}, {"init_args", init_args}}, "trainer.callbacks").at(0);
    Normed module;
    Trainer(testing::quiet().max_epochs(1), {built}).fit(module, testing::tiny_data(8, 4));
    const auto& averaged = std::dynamic_pointer_cast<WeightAveraging>(built)->averaged();
    EXPECT_TRUE(std::all_of(averaged.begin(), averaged.end(), [](const auto& t) { return t.device().is_cpu(); }));
    return averaged.size();
  };
  // TinyModule's linear, fc, norm and out: 8 parameters; norm's buffers: running mean, variance, count.
  EXPECT_EQ(averaging("EMAWeightAveraging", {{"decay", 0.5}, {"use_buffers", false}, {"device", "cpu"}}), 8u);
  EXPECT_EQ(averaging("lightning.pytorch.callbacks.EMAWeightAveraging", {{"device", nullptr}}), 11u);
  EXPECT_EQ(averaging("WeightAveraging", {{"use_buffers", false}, {"device", "cpu"}}), 8u);
  const auto named = testing::error_of([] {
    callbacks_from_json({{"class_path", "WeightAveraging"}, {"init_args", {{"device", "gpu"}}}}, "trainer.callbacks");
  });
  EXPECT_NE(named.find("'trainer.callbacks.init_args.device' is \"gpu\", which is not a device"), std::string::npos)
      << named;
}

}  // namespace
}  // namespace arc
