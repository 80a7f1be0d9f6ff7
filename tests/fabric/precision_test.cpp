// Precision plugins and the gradient scaler, on the CPU (CUDA cases skip without a GPU).
#include "support/errors.h"
#include "support/tiny_module.h"

#include <arc/base/detail/torch_compat.h>
#include <arc/fabric/grad_scaler.h>
#include <arc/fabric/precision.h>

#include <gtest/gtest.h>

#include <set>

namespace arc {
namespace {

using namespace testing;

struct Scaled {
  torch::Tensor weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd{std::vector<torch::Tensor>{weight}, torch::optim::SGDOptions(0.1)};

  // A backward of loss = sum(weight * g) through `scaler`, with `g` as the true gradient.
  void backward(GradScaler& scaler, const torch::Tensor& g) {
    sgd.zero_grad();
    scaler.scale((weight * g).sum()).backward();
  }
};

TEST(GradScaler, UnscalesOnceAndStepsWithTrueGradients) {
  GradScaler scaler(GradScalerOptions().init_scale(1024));
  Scaled model;
  model.backward(scaler, torch::full({3}, 2.0f));
  EXPECT_TRUE(torch::equal(model.weight.grad(), torch::full({3}, 2048.0f)));
  scaler.unscale(model.sgd);
  scaler.unscale(model.sgd);
  EXPECT_TRUE(torch::equal(model.weight.grad(), torch::full({3}, 2.0f))) << "unscaled exactly once";
  EXPECT_TRUE(scaler.step(model.sgd));
  EXPECT_TRUE(torch::allclose(model.weight, torch::full({3}, 0.8f)));
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, SkipsStepsWithInfOrNanAndBacksOff) {
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(3));
  Scaled model;
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const auto before = model.weight.detach().clone();
    model.backward(scaler, torch::tensor({1.0f, bad, 1.0f}));
    EXPECT_FALSE(scaler.step(model.sgd));
    EXPECT_TRUE(torch::equal(model.weight, before)) << "a skipped step leaves the weights alone";
    scaler.update();
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
  EXPECT_EQ(scaler.current_scale(), 256);
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanStepsAndRoundTrips) {
  GradScaler scaler(GradScalerOptions().init_scale(8).growth_interval(3).growth_factor(4).backoff_factor(0.25));
  Scaled model;
  for (int i = 0; i < 3; ++i) {
    model.backward(scaler, torch::ones({3}));
    EXPECT_TRUE(scaler.step(model.sgd));
    scaler.update();
  }
  EXPECT_EQ(scaler.current_scale(), 32);
  model.backward(scaler, torch::ones({3}));
  scaler.step(model.sgd);
  scaler.update();
  GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  EXPECT_EQ(restored.state_dict(), scaler.state_dict());
  EXPECT_EQ(restored.growth_tracker(), 1);
  model.backward(restored, torch::tensor({1.0f, INFINITY, 1.0f}));
  restored.step(model.sgd);
  restored.update();
  EXPECT_EQ(restored.current_scale(), 8) << "the restored backoff factor (0.25) applies";
}

TEST(Precision, NamesAliasesAndErrors) {
  EXPECT_EQ(Precision("32", torch::kCPU).name(), "32-true");
  EXPECT_EQ(Precision("bf16", torch::kCPU).name(), "bf16-mixed");
  EXPECT_EQ(Precision("16-mixed", torch::kCPU).name(), "bf16-mixed") << "float16 autocast needs CUDA";
  EXPECT_EQ(Precision("16-mixed", torch::kCPU).scaler(), nullptr);
  const Precision cuda("16-mixed", torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(cuda.name(), "16-mixed");
  ASSERT_NE(cuda.scaler(), nullptr);
  EXPECT_EQ(cuda.state_dict().at("scale"), 65536.0);
  EXPECT_EQ(Precision("64-true", torch::kCPU).input_dtype(), torch::kDouble);
  const auto message = error_of([] { Precision("8-mixed", torch::kCPU); });
  EXPECT_NE(message.find("unknown precision '8-mixed'"), std::string::npos) << message;
  EXPECT_NE(message.find("known: 32-true, 32, 64-true"), std::string::npos) << message;
  // The option is checked against the same names.
  const auto option = error_of([] { TrainerOptions().precision("fp8").validate(); });
  EXPECT_NE(option.find("unknown precision 'fp8'"), std::string::npos) << option;
  EXPECT_NE(option.find("bf16-true, 16-true"), std::string::npos) << option;
  EXPECT_EQ(error_of([] { TrainerOptions().precision("bf16").validate(); }), "");
}

// Records what the steps compute in.
struct DtypeProbe : TinyModule {
  std::set<torch::ScalarType> train_outputs, val_outputs, inputs;
  torch::Tensor training_step(Batch& batch, int64_t) override {
    inputs.insert(batch[0].scalar_type());
    const auto out = linear(batch[0]);
    train_outputs.insert(out.scalar_type());
    // 1.13 has no bfloat16 mse_loss on the CPU.
    return torch::mse_loss(out.to(torch::kFloat), batch[1].to(torch::kFloat));
  }
  void validation_step(Batch& batch, int64_t) override { val_outputs.insert(linear(batch[0]).scalar_type()); }
};

TEST(Precision, Bf16MixedAutocastsStepsAndKeepsFloatWeights) {
  DtypeProbe module;
  Trainer trainer(quiet().max_epochs(1).precision("bf16-mixed"));
  trainer.fit(module, tiny_data(8, 4), tiny_data(4, 2));
  EXPECT_EQ(module.train_outputs, std::set<torch::ScalarType>{torch::kBFloat16});
  EXPECT_EQ(module.val_outputs, std::set<torch::ScalarType>{torch::kBFloat16});
  EXPECT_EQ(module.inputs, std::set<torch::ScalarType>{torch::kFloat});
  EXPECT_EQ(module.linear->weight.scalar_type(), torch::kFloat);
  EXPECT_TRUE(module.linear->weight.grad().defined());
  EXPECT_FALSE(compat::autocast_enabled(torch::kCPU)) << "autocast is off outside the steps";
}

TEST(Precision, TruePrecisionsCastModuleAndInputs) {
  for (const auto& [name, dtype] : std::vector<std::pair<std::string, torch::ScalarType>>{
           {"64-true", torch::kDouble}, {"bf16-true", torch::kBFloat16}}) {
    DtypeProbe module;
    Trainer(quiet().max_epochs(1).precision(name)).fit(module, tiny_data(8, 4));
    EXPECT_EQ(module.linear->weight.scalar_type(), dtype) << name;
    EXPECT_EQ(module.inputs, std::set<torch::ScalarType>{dtype}) << name;
  }
}

TEST(Precision, SixteenMixedOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: 16-mixed with the GradScaler runs on a GPU only";
  DtypeProbe module;
  Trainer trainer(quiet().max_epochs(1).accelerator("gpu").devices(Devices::of_count(1)).precision("16-mixed"));
  trainer.fit(module, tiny_data(8, 4));
  EXPECT_EQ(module.train_outputs, std::set<torch::ScalarType>{torch::kHalf});
  ASSERT_NE(trainer.precision().scaler(), nullptr);
  EXPECT_GT(trainer.precision().scaler()->current_scale(), 0);
}

}  // namespace
}  // namespace arc
