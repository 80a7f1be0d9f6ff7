// Optimizer state in checkpoints: LibTorch's optimizers round-trip raw and continue bit for bit,
// others through an archive, format-2 files still load, and mismatches are named.
#include "support/errors.h"
#include "support/scratch.h"

#include <arc/base/detail/torch_compat.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/optimizer_state.h>

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <functional>

namespace arc {
namespace {

namespace fs = std::filesystem;
using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

std::string scratch_file(const std::string& name) {
  return (arc::testing::process_scratch() / ("optim_" + name + ".ckpt")).string();
}

// Two parameter groups, so that group options and indices across groups are exercised.
std::unique_ptr<torch::optim::Optimizer> two_groups(torch::nn::Linear& model, const Factory& make) {
  return make({torch::optim::OptimizerParamGroup({model->weight}), torch::optim::OptimizerParamGroup({model->bias})});
}

void train(torch::nn::Linear& model, torch::optim::Optimizer& optimizer, int steps) {
  const auto input = torch::arange(8.0).view({2, 4}) / 8;
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    model(input).pow(2).sum().backward();
    optimizer.step();
  }
}

void copy_weights(torch::nn::Linear& from, torch::nn::Linear& into) {
  torch::NoGradGuard no_grad;
  into->weight.copy_(from->weight);
  into->bias.copy_(from->bias);
}

torch::nn::Linear copy_of(torch::nn::Linear& model) {
  torch::nn::Linear copy(4, 3);
  copy_weights(model, copy);
  return copy;
}

// Trains 3 steps, saves raw, loads into an optimizer built with other options (fresh, or one that
// has stepped and so has state tensors to refill), and checks that both continue to the same bits.
void expect_round_trip(const std::string& name, const Factory& make, const Factory& make_other) {
  for (const bool stepped : {false, true}) {
    SCOPED_TRACE(name + (stepped ? ", into an optimizer with state" : ", into a fresh optimizer"));
    torch::manual_seed(0);
    torch::nn::Linear model(4, 3);
    auto optimizer = two_groups(model, make);
    train(model, *optimizer, 3);
    const auto path = scratch_file(name);
    CheckpointWriter writer(nlohmann::json::object());
    save_optimizer(writer, "optimizer_0", *optimizer);
    writer.write(path);

    torch::nn::Linear resumed(4, 3);
    auto restored = two_groups(resumed, make_other);
    if (stepped) train(resumed, *restored, 1);
    copy_weights(model, resumed);
    const CheckpointReader reader(path);
    EXPECT_FALSE(reader.holds_archive("optimizer_0"));
    load_optimizer(reader, "optimizer_0", *restored);
    fs::remove(path);
    for (size_t g = 0; g < 2; ++g)
      EXPECT_EQ(restored->param_groups()[g].options().get_lr(), optimizer->param_groups()[g].options().get_lr());
    train(model, *optimizer, 2);
    train(resumed, *restored, 2);
    EXPECT_TRUE(torch::equal(model->weight, resumed->weight));
    EXPECT_TRUE(torch::equal(model->bias, resumed->bias));
  }
}

template <typename Optimizer, typename Options>
Factory factory(Options options) {
  return [options](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<Optimizer>(std::move(groups), options);
  };
}

TEST(OptimizerState, LibTorchsOptimizersRoundTripRawAndContinueBitForBit) {
  using namespace torch::optim;
  expect_round_trip("sgd", factory<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)),
                    factory<SGD>(SGDOptions(0.5)));
  expect_round_trip("adam", factory<Adam>(AdamOptions(0.01).amsgrad(true).betas({0.8, 0.95})),
                    factory<Adam>(AdamOptions(0.3)));
  expect_round_trip("adamw", factory<AdamW>(AdamWOptions(0.01).weight_decay(0.1)), factory<AdamW>(AdamWOptions(0.3)));
  expect_round_trip("rmsprop", factory<RMSprop>(RMSpropOptions(0.01).momentum(0.5).centered(true)),
                    factory<RMSprop>(RMSpropOptions(0.3)));
  expect_round_trip("adagrad", factory<Adagrad>(AdagradOptions(0.1).lr_decay(0.01)),
                    factory<Adagrad>(AdagradOptions(0.3)));
}

TEST(OptimizerState, OtherOptimizersRoundTripThroughAnArchive) {
  using namespace torch::optim;
  const auto lbfgs = [](std::vector<torch::Tensor> parameters) {
    return std::make_unique<LBFGS>(std::move(parameters), LBFGSOptions(0.1).history_size(4));
  };
  // LBFGS takes one group only.
  torch::manual_seed(0);
  torch::nn::Linear model(4, 3);
  auto optimizer = lbfgs(model->parameters());
  const auto input = torch::arange(8.0).view({2, 4}) / 8;
  const auto closure = [&](torch::nn::Linear& m, Optimizer& o) {
    o.step([&] {
      o.zero_grad();
      auto loss = m(input).pow(2).sum();
      loss.backward();
      return loss;
    });
  };
  closure(model, *optimizer);
  const auto path = scratch_file("lbfgs");
  CheckpointWriter writer(nlohmann::json::object());
  save_optimizer(writer, "optimizer_0", *optimizer);
  writer.write(path);
  auto resumed = copy_of(model);
  auto restored = lbfgs(resumed->parameters());
  const CheckpointReader reader(path);
  EXPECT_TRUE(reader.holds_archive("optimizer_0"));
  load_optimizer(reader, "optimizer_0", *restored);
  fs::remove(path);
  closure(model, *optimizer);
  closure(resumed, *restored);
  EXPECT_TRUE(torch::equal(model->weight, resumed->weight));
}

TEST(OptimizerState, ParametersWithoutStateStayWithout) {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  const auto path = scratch_file("stateless");
  CheckpointWriter writer(nlohmann::json::object());
  save_optimizer(writer, "optimizer_0", adam);
  writer.write(path);
  torch::optim::Adam restored(model->parameters(), torch::optim::AdamOptions(0.01));
  train(model, restored, 1);
  ASSERT_EQ(restored.state().size(), 2u);
  load_optimizer(CheckpointReader(path), "optimizer_0", restored);
  fs::remove(path);
  EXPECT_EQ(restored.state().size(), 0u);
}

// Under sharding a rank reads the states it owns (-1: every rank's) and leaves the others out.
TEST(OptimizerState, AShardedRankReadsTheStatesItOwns) {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  train(model, adam, 2);
  const auto path = scratch_file("owned");
  CheckpointWriter writer(nlohmann::json::object());
  save_optimizer(writer, "optimizer_0", adam);
  writer.write(path);
  for (const std::vector<int64_t>& owners : {std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, -1}}) {
    torch::optim::Adam restored(model->parameters(), torch::optim::AdamOptions(0.01));
    load_optimizer(CheckpointReader(path), "optimizer_0", restored, owners, 1);
    const auto* weight = compat::param_state(restored, model->weight);
    const auto* bias = compat::param_state(restored, model->bias);
    EXPECT_EQ(weight != nullptr, owners[0] != 0);
    ASSERT_NE(bias, nullptr);
    const auto& saved = static_cast<const torch::optim::AdamParamState&>(*compat::param_state(adam, model->bias));
    EXPECT_TRUE(torch::equal(static_cast<const torch::optim::AdamParamState*>(bias)->exp_avg(), saved.exp_avg()));
  }
  fs::remove(path);
}

// tests/core/data/format2_adam.ckpt was written by the format-2 writer (Arclight at cb1ee7a) under
// LibTorch 1.13: the model and the Adam optimizer below, after the same three steps, the optimizer
// as a LibTorch archive. It loads under LibTorch 2.x too, whose own Optimizer::load pairs a 1.x
// archive's states with the wrong parameters, and it restores the group's options, as format 3 does.
// Within rounding: another LibTorch's arithmetic may differ from 1.13's in the last bits.
TEST(OptimizerState, FormatTwoFilesStillLoad) {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01).amsgrad(true));
  const auto input = torch::arange(8.0).view({2, 4});
  const auto step = [&](torch::nn::Linear& m, torch::optim::Optimizer& o) {
    o.zero_grad();
    m(input).pow(2).sum().backward();
    o.step();
  };
  for (int i = 0; i < 3; ++i) step(model, adam);
  const CheckpointReader reader(std::string(ARC_SOURCE_DIR) + "/tests/core/data/format2_adam.ckpt");
  EXPECT_EQ(reader.meta().at("written_by"), "format 2");
  torch::nn::Linear loaded(4, 3);
  reader.load_module(*loaded);
  torch::optim::Adam restored(loaded->parameters(), torch::optim::AdamOptions(0.5));
  load_optimizer(reader, "optimizer_0", restored);
  const auto& options = static_cast<const torch::optim::AdamOptions&>(restored.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.01);
  EXPECT_TRUE(options.amsgrad());
  for (const auto& parameter : loaded->parameters()) {
    const auto* state = dynamic_cast<const torch::optim::AdamParamState*>(compat::param_state(restored, parameter));
    ASSERT_NE(state, nullptr);
    EXPECT_EQ(state->step(), 3);
    EXPECT_EQ(state->max_exp_avg_sq().sizes(), parameter.sizes());
  }
  EXPECT_TRUE(torch::allclose(loaded->weight, model->weight));
  for (int i = 0; i < 2; ++i) {
    step(model, adam);
    step(loaded, restored);
  }
  EXPECT_TRUE(torch::allclose(loaded->weight, model->weight));
  EXPECT_TRUE(torch::allclose(loaded->bias, model->bias));
}

TEST(OptimizerState, AnotherOptimizerOrGroupSizeIsNamed) {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  train(model, adam, 1);
  const auto path = scratch_file("mismatch");
  CheckpointWriter writer(nlohmann::json::object());
  save_optimizer(writer, "optimizer_0", adam);
  writer.write(path);
  const CheckpointReader reader(path);
  fs::remove(path);

  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto kind = testing::error_of([&] { load_optimizer(reader, "optimizer_0", sgd); });
  EXPECT_NE(kind.find("holds optimizer_0 as the state of an optimizer of type Adam"), std::string::npos) << kind;
  EXPECT_NE(kind.find("resume with the optimizer it was saved with"), std::string::npos) << kind;

  torch::optim::Adam fewer(std::vector<torch::Tensor>{model->weight}, torch::optim::AdamOptions(0.01));
  const auto size = testing::error_of([&] { load_optimizer(reader, "optimizer_0", fewer); });
  EXPECT_NE(size.find("holds 2 parameters in group 0 of optimizer_0, the optimizer has 1"), std::string::npos) << size;
}

// Format 2 did not store the optimizer's type: an archive another type cannot read says so.
TEST(OptimizerState, AFormatTwoArchiveOfAnotherOptimizerOrGroupSizeIsNamed) {
  const std::string file = std::string(ARC_SOURCE_DIR) + "/tests/core/data/format2_adam.ckpt";
  const CheckpointReader reader(file);
  torch::nn::Linear model(4, 3);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto kind = testing::error_of([&] { load_optimizer(reader, "optimizer_0", sgd); });
  EXPECT_NE(kind.find("checkpoint '" + file +
                      "' holds optimizer_0 as a LibTorch archive that LibTorch's SGD "
                      "cannot read (LibTorch: "),
            std::string::npos)
      << kind;
  EXPECT_NE(kind.find("); configure_optimizers() must build the optimizer it was saved with"), std::string::npos)
      << kind;
  torch::optim::Adam fewer(std::vector<torch::Tensor>{model->weight}, torch::optim::AdamOptions(0.01));
  const auto size = testing::error_of([&] { load_optimizer(reader, "optimizer_0", fewer); });
  EXPECT_NE(size.find("holds 2 parameters in group 0 of optimizer_0, the optimizer has 1"), std::string::npos) << size;
}

}  // namespace
}  // namespace arc
