// ModelPruning: torch.nn.utils.prune's masks, held through training, and a resumed fit that prunes on
// exactly as an uninterrupted one.
#include "support/command.h"
#include "support/errors.h"
#include "support/python.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace arc {
namespace {

using testing::weights_of;

// Two linear layers, a (6 → 5) and b (5 → 1), for regression.
class TwoLayers : public TrainModule {
 public:
  TwoLayers() : TrainModule("TwoLayers") {
    torch::manual_seed(11);
    a = register_module("a", torch::nn::Linear(6, 5));
    b = register_module("b", torch::nn::Linear(5, 1));
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    return torch::mse_loss(b(torch::relu(a(batch[0]))), batch[1]);
  }
  void validation_step(Batch& batch, int64_t) override {
    log("val_loss", torch::mse_loss(b(torch::relu(a(batch[0]))), batch[1]));
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05).momentum(0.9))};
  }

  torch::nn::Linear a{nullptr}, b{nullptr};
};

DataSource regression_data() {
  torch::manual_seed(2);
  auto x = torch::randn({128, 6});
  auto y = x.sum(1, true);
  return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, y}), DataLoaderOptions(16).shuffle(true)};
}

// Prunings by `amounts` on the module's weights as they are, with the callback configured by
// `options`; each mask as a list of 0/1, by parameter name.
nlohmann::json pruned_masks(ModelPruningOptions options, const std::vector<PruningAmount>& amounts) {
  TwoLayers module;
  ModelPruning pruning(std::move(options));
  Trainer trainer(testing::quiet());
  pruning.setup(trainer, module, Stage::fit);
  for (const auto amount : amounts) pruning.apply_pruning(trainer, amount);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, mask] : pruning.masks()) {
    const auto flat = mask.flatten().to(torch::kInt64);
    out[name] = std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  }
  return out;
}

TEST(ModelPruning, MasksAreTorchPrunesGlobalLocalAndStructured) {
  const auto interpreter = testing::python_with_torch();
  ASSERT_FALSE(interpreter.empty()) << testing::kNoPythonWithTorch;
  TwoLayers module;
  nlohmann::json weights = nlohmann::json::object();
  for (const auto& item : module.named_parameters()) {
    const auto flat = item.value().detach().flatten().to(torch::kDouble);
    weights[item.key()] = {std::vector<double>(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel()),
                           item.value().sizes().vec()};
  }
  const auto dir = testing::process_scratch() / "pruning";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "weights.json") << weights.dump();
  // PyTorch's own prune on the same weights and amounts; Lightning's parameter order
  // (every weight, then every bias) for the global ranking.
  std::ofstream(dir / "prune.py")
      << "import json, sys, torch\n"
         "import torch.nn.utils.prune as prune\n"
         "w = json.load(open(sys.argv[1]))\n"
         "def model():\n"
         "    m = torch.nn.ModuleDict({'a': torch.nn.Linear(6, 5), 'b': torch.nn.Linear(5, 1)})\n"
         "    for name, (values, shape) in w.items():\n"
         "        layer, p = name.split('.')\n"
         "        getattr(m[layer], p).data = torch.tensor(values, dtype=torch.float32).view(shape)\n"
         "    return m\n"

         "def masks(m, names):\n"
         "    return {l + '.' + p: getattr(m[l], p + '_mask').flatten().long().tolist() for l, p in names}\n"
         "out = {}\n"
         "m = model()\n"
         "names = [('a', 'weight'), ('b', 'weight'), ('a', 'bias'), ('b', 'bias')]\n"
         "for amount in (0.3, 0.5, 7):\n"
         "    prune.global_unstructured([(m[l], p) for l, p in names], prune.L1Unstructured, amount=amount)\n"
         "out['global'] = masks(m, names)\n"
         "m = model()\n"
         "for amount in (0.3, 0.5):\n"
         "    for l, p in names:\n"
         "        prune.l1_unstructured(m[l], p, amount=amount)\n"
         "out['local'] = masks(m, names)\n"
         "m = model()\n"
         "for amount in (0.3, 0.4):\n"
         "    prune.ln_structured(m['a'], 'weight', amount=amount, n=1, dim=0)\n"
         "out['structured'] = masks(m, [('a', 'weight')])\n"
         "print('MASKS', json.dumps(out))\n";
  const auto python =
      testing::run_command(interpreter + " " + (dir / "prune.py").string() + " " + (dir / "weights.json").string());
  ASSERT_EQ(python.status, 0) << python.output;
  const auto torch_masks = nlohmann::json::parse(python.output.substr(python.output.find("MASKS ") + 6));

  // Global: 30%, half of what is left, then 7 more; each parameter alone: 30%, then half.
  const auto third_half = {PruningAmount::fraction(0.3), PruningAmount::fraction(0.5)};
  EXPECT_EQ(pruned_masks(ModelPruningOptions(),
                         {PruningAmount::fraction(0.3), PruningAmount::fraction(0.5), PruningAmount::count(7)}),
            torch_masks["global"]);
  EXPECT_EQ(pruned_masks(ModelPruningOptions().use_global_unstructured(false), third_half), torch_masks["local"]);
  // ln_structured: whole rows of a's weight (its output channels) by their L1 norm, 30% and then 40%
  // of what is left (5 rows: round(1.5) = 2 pruned, then round(1.2) = 1 of the 3 left).
  TwoLayers rows;
  ModelPruning structured(ModelPruningOptions()
                              .pruning_fn("ln_structured")
                              .use_global_unstructured(false)
                              .pruning_dim(0)
                              .pruning_norm(1)
                              .parameters_to_prune({{"a", "weight"}}));
  Trainer trainer(testing::quiet());
  structured.setup(trainer, rows, Stage::fit);
  for (const auto amount : {PruningAmount::fraction(0.3), PruningAmount::fraction(0.4)})
    structured.apply_pruning(trainer, amount);
  const auto mask = structured.masks().at(0).second.flatten().to(torch::kInt64);
  EXPECT_EQ(std::vector<int64_t>(mask.data_ptr<int64_t>(), mask.data_ptr<int64_t>() + mask.numel()),
            torch_masks["structured"]["a.weight"].get<std::vector<int64_t>>());
  EXPECT_EQ(structured.masks().at(0).second.sum().item<int64_t>(), 12) << "two rows of six kept";
  std::filesystem::remove_all(dir);
}

TEST(ModelPruning, KeepsPrunedWeightsAtZeroResetsTheRestAndResumesExactly) {
  // Three epochs, 30% of what is left pruned at each end, masks kept after fit to look at.
  TwoLayers module;
  const auto first = weights_of(module);
  auto pruning = std::make_shared<ModelPruning>(
      ModelPruningOptions().amount([](int64_t) { return PruningAmount::fraction(0.3); }).make_pruning_permanent(false));
  // While it trains, the pruned weights are zero at every batch's start and their gradients zero
  // when the optimizer steps (after the callback's own hook: it comes first).
  double largest_pruned_weight = 0, largest_pruned_gradient = 0;
  int64_t checked = 0;
  const auto largest_pruned = [&](bool gradients) {
    double largest = 0;
    for (const auto& [name, mask] : pruning->masks()) {
      const auto parameter = module.named_parameters()[name];
      const auto pruned = (gradients ? parameter.grad() : parameter.detach()).masked_select(mask == 0);
      if (pruned.numel() == 0) continue;
      largest = std::max(largest, pruned.abs().max().item<double>());
      ++checked;
    }
    return largest;
  };
  auto watch = std::make_shared<LambdaCallback>();
  watch->train_batch_start = [&](Trainer&, TrainModule&, Batch&, int64_t) {
    largest_pruned_weight = std::max(largest_pruned_weight, largest_pruned(false));
  };
  watch->before_optimizer_step = [&](Trainer&, TrainModule&, torch::optim::Optimizer&) {
    largest_pruned_gradient = std::max(largest_pruned_gradient, largest_pruned(true));
  };
  Trainer(testing::quiet().seed(4).max_epochs(3), {pruning, watch}).fit(module, regression_data());
  EXPECT_GT(checked, 0) << "epochs 1 and 2 trained with masks";
  EXPECT_EQ(largest_pruned_weight, 0);
  EXPECT_EQ(largest_pruned_gradient, 0);
  int64_t total = 0, zeros = 0;
  for (const auto& [name, mask] : pruning->masks()) {
    total += mask.numel();
    zeros += (mask == 0).sum().item<int64_t>();
  }
  // 41 weights and biases: round(12.3) = 12, round(8.7) = 9, round(6) = 6 pruned.
  EXPECT_EQ(total, 41);
  EXPECT_EQ(zeros, 27);
  // Lottery tickets: after the last pruning, the weights left are their values at fit start.
  const auto last = weights_of(module);
  std::vector<torch::Tensor> masks;
  for (const auto& [name, mask] : pruning->masks()) masks.push_back(mask.flatten());
  // masks() follows the pruning order (weights, then biases); weights_of the module's (a, then b).
  const auto order = torch::cat({masks[0], masks[2], masks[1], masks[3]});
  EXPECT_TRUE(torch::equal(last, first * order));
  EXPECT_EQ((last == 0).sum().item<int64_t>(), 27);

  // An uninterrupted fit of four epochs, and one resumed from its checkpoint after the second.
  const auto dir = testing::process_scratch() / "pruning_resume";
  std::filesystem::remove_all(dir);
  TwoLayers whole;
  auto checkpoints = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().dirpath(dir.string()).save_top_k(-1).filename("{epoch}"));
  Trainer(testing::quiet().seed(4).max_epochs(4), {std::make_shared<ModelPruning>(), checkpoints})
      .fit(whole, regression_data());
  TwoLayers resumed;
  Trainer(testing::quiet().seed(4).max_epochs(4), {std::make_shared<ModelPruning>()})
      .fit(resumed, regression_data(), {}, (dir / "epoch=1.ckpt").string());
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(whole)));
  // The checkpoint's weights are the pruned ones, as Lightning's make_pruning_permanent leaves them.
  const CheckpointReader saved((dir / "epoch=1.ckpt").string());
  int64_t saved_zeros = 0;
  for (const char* name : {"model/a.weight", "model/a.bias", "model/b.weight", "model/b.bias"})
    saved_zeros += (saved.tensor(name) == 0).sum().item<int64_t>();
  EXPECT_EQ(saved_zeros, 30) << "two prunings of half: round(20.5) = 20, then round(10.5) = 10";
  std::filesystem::remove_all(dir);
}

// The number of pruned entries of `pruning`'s masks.
int64_t pruned_count(const ModelPruning& pruning) {
  int64_t zeros = 0;
  for (const auto& [name, mask] : pruning.masks()) zeros += (mask == 0).sum().item<int64_t>();
  return zeros;
}

TEST(ModelPruning, PrunesAtValidationEndsButNotTheSanityCheckAndResamples) {
  // Two epochs validating once each (after a sanity check): two prunings of 30%, 12 then 9.
  TwoLayers module;
  auto at_validation = std::make_shared<ModelPruning>(ModelPruningOptions()
                                                          .amount([](int64_t) { return PruningAmount::fraction(0.3); })
                                                          .prune_on_train_epoch_end(false)
                                                          .make_pruning_permanent(false));
  Trainer(testing::quiet().seed(4).max_epochs(2), {at_validation}).fit(module, regression_data(), regression_data());
  EXPECT_EQ(pruned_count(*at_validation), 21);

  // Lottery tickets drawn anew: the weights left after the last pruning are neither the first ones
  // nor trained ones, but fresh draws of Linear's initialisation (|w| <= 1/sqrt(fan_in)).
  TwoLayers drawn;
  const auto first = weights_of(drawn);
  auto resampling = std::make_shared<ModelPruning>(ModelPruningOptions().resample_parameters(true));
  Trainer(testing::quiet().seed(4).max_epochs(1), {resampling}).fit(drawn, regression_data());
  const auto a = drawn.a->weight.detach();
  EXPECT_EQ((a == 0).sum().item<int64_t>() + (drawn.b->weight == 0).sum().item<int64_t>() +
                (drawn.a->bias == 0).sum().item<int64_t>() + (drawn.b->bias == 0).sum().item<int64_t>(),
            20)
      << "round(20.5) = 20 of 41";
  EXPECT_LE(a.abs().max().item<double>(), 1 / std::sqrt(6.0));
  const auto kept = weights_of(drawn) != 0;
  EXPECT_FALSE(torch::equal(weights_of(drawn).masked_select(kept), first.masked_select(kept)));
}

TEST(ModelPruning, BadOptionsSayWhatToGive) {
  const auto error = [](const ModelPruningOptions& options) {
    return testing::error_of([&] { ModelPruning{options}; });
  };
  EXPECT_NE(error(ModelPruningOptions().pruning_fn("l2_unstructured")).find("is not one of torch.nn.utils.prune's"),
            std::string::npos);
  EXPECT_NE(
      error(ModelPruningOptions().pruning_fn("ln_structured").use_global_unstructured(false)).find("set pruning_dim"),
      std::string::npos);
  EXPECT_NE(error(ModelPruningOptions().pruning_fn("ln_structured").pruning_dim(0).use_global_unstructured(false))
                .find("set pruning_norm"),
            std::string::npos);
  EXPECT_NE(error(ModelPruningOptions().pruning_fn("random_structured").pruning_dim(0))
                .find("set "
                      "use_global_unstructured "
                      "to false"),
            std::string::npos);
  EXPECT_NE(error(ModelPruningOptions().parameter_names({"kernel"})).find("\"kernel\""), std::string::npos);
  // Structured pruning of a bias (one dimension), and a missing parameter, at fit's setup.
  TwoLayers module;
  const auto bias = testing::error_of([&] {
    Trainer(testing::quiet().max_epochs(1),
            {std::make_shared<ModelPruning>(
                ModelPruningOptions().pruning_fn("random_structured").pruning_dim(0).use_global_unstructured(false))})
        .fit(module, regression_data());
  });
  EXPECT_NE(bias.find("a.bias has 1; leave it out (parameter_names: [weight])"), std::string::npos) << bias;
  const auto past = testing::error_of([&] {
    Trainer(testing::quiet().max_epochs(1), {std::make_shared<ModelPruning>(ModelPruningOptions()
                                                                                .pruning_fn("ln_structured")
                                                                                .pruning_dim(2)
                                                                                .pruning_norm(1)
                                                                                .parameter_names({"weight"})
                                                                                .use_global_unstructured(false))})
        .fit(module, regression_data());
  });
  EXPECT_NE(past.find("pruning_dim is 2, which is not a dimension of a.weight (2 of them); give one from -2 to 1"),
            std::string::npos)
      << past;
  const auto missing = testing::error_of([&] {
    Trainer(testing::quiet().max_epochs(1),
            {std::make_shared<ModelPruning>(ModelPruningOptions().parameters_to_prune({{"c", "weight"}}))})
        .fit(module, regression_data());
  });
  EXPECT_NE(missing.find("names (\"c\", \"weight\"), which TwoLayers does not have"), std::string::npos) << missing;
  const auto too_many = testing::error_of([&] {
    ModelPruning pruning;
    Trainer trainer(testing::quiet());
    pruning.setup(trainer, module, Stage::fit);
    pruning.apply_pruning(trainer, PruningAmount::count(50));
  });
  EXPECT_NE(too_many.find("amount 50 is more than the 41 unpruned entries"), std::string::npos) << too_many;
}

}  // namespace
}  // namespace arc
