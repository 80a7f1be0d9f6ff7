// Checkpoint ergonomics: load_from_checkpoint builds the module from its stored hyper-parameters,
// strict=false loads what matches, ckpt_path="hpc" finds the requeue checkpoints.
#include "support/tiny_module.h"

#include "support/errors.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

namespace arc {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::fresh_folder;
using testing::quiet;
using testing::tiny_data;
using testing::weights_of;

// A module whose shape its hyper-parameters decide, as a Lightning module's __init__ arguments do.
class Sized : public TrainModule {
 public:
  explicit Sized(const nlohmann::json& hparams) : TrainModule("Sized") {
    const auto width = hparams.at("width").get<int64_t>();
    hidden = register_module("hidden", torch::nn::Linear(4, width));
    out = register_module("out", torch::nn::Linear(width, 1));
    if (hparams.value("extra", false)) extra = register_module("extra", torch::nn::Linear(1, 1));
    lr_ = hparams.value("lr", 0.1);
    save_hyperparameters(hparams);
  }
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto y = out(torch::relu(hidden(batch[0])));
    if (extra) y = extra(y);
    return torch::mse_loss(y, batch[1]);
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_))};
  }
  torch::nn::Linear hidden{nullptr}, out{nullptr}, extra{nullptr};

 private:
  double lr_;
};

// Trains `module` for an epoch and saves it as <root>/<name>; the path.
std::string train_and_save(Sized& module, const fs::path& root, const std::string& name) {
  Trainer trainer(quiet().default_root_dir(root.string()).max_epochs(1));
  trainer.fit(module, tiny_data(8, 2));
  const std::string path = (root / name).string();
  trainer.save_checkpoint(path);
  return path;
}

TEST(LoadFromCheckpoint, BuildsTheModuleFromItsHyperparametersWithItsWeights) {
  const fs::path root = fresh_folder("hparams");
  Sized trained(nlohmann::json{{"width", 6}, {"lr", 0.1}});
  const auto path = train_and_save(trained, root, "w.ckpt");
  const auto loaded = load_from_checkpoint<Sized>(path);
  EXPECT_EQ(loaded->hparams(), (nlohmann::json{{"width", 6}, {"lr", 0.1}}));
  EXPECT_EQ(loaded->hidden->weight.size(0), 6);
  EXPECT_TRUE(torch::equal(weights_of(*loaded), weights_of(trained)));

  LoadOptions options;
  options.hparams({{"lr", 0.5}});
  EXPECT_EQ(load_from_checkpoint<Sized>(path, options)->hparams(), (nlohmann::json{{"width", 6}, {"lr", 0.5}}));
  options.hparams({{"width", 3}});
  const auto message = error_of([&] { load_from_checkpoint<Sized>(path, options); });
  EXPECT_NE(message.find("'hidden.weight' has shape [6,4], the module has [3,4]"), std::string::npos) << message;
  // The checkpoint's own hyperparameters say what would match it.
  EXPECT_NE(message.find("It was written for Sized with hyperparameters {\"lr\":0.1,\"width\":6}; load it"),
            std::string::npos)
      << message;
  EXPECT_NE(error_of([&] { load_from_checkpoint<Sized>((root / "none.ckpt").string()); }).find("none.ckpt"),
            std::string::npos);
  fs::remove_all(root);
}

// Lightning's strict=False: what matches is loaded, what does not is reported and left as it is.
TEST(LoadFromCheckpoint, NotStrictLoadsWhatMatchesAndNamesTheRest) {
  const fs::path root = fresh_folder("strict");
  Sized trained(nlohmann::json{{"width", 5}});
  const auto plain = train_and_save(trained, root, "plain.ckpt");
  LoadOptions with_extra;
  with_extra.hparams({{"extra", true}});
  const auto message = error_of([&] { load_from_checkpoint<Sized>(plain, with_extra); });
  EXPECT_NE(message.find("missing 'extra.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find("strict=false"), std::string::npos) << message;

  with_extra.strict(false);
  const auto grown = load_from_checkpoint<Sized>(plain, with_extra);
  EXPECT_TRUE(torch::equal(grown->out->weight, trained.out->weight));
  Sized again(nlohmann::json{{"width", 5}, {"extra", true}});
  const auto unmatched = load_checkpoint_weights(again, plain, /*strict=*/false);
  EXPECT_EQ(unmatched.missing_keys, (std::vector<std::string>{"extra.weight", "extra.bias"}));
  EXPECT_TRUE(unmatched.unexpected_keys.empty());

  Sized larger(nlohmann::json{{"width", 5}, {"extra", true}});
  const auto bigger = train_and_save(larger, root, "bigger.ckpt");
  Sized smaller(nlohmann::json{{"width", 5}});
  auto reverse = load_checkpoint_weights(smaller, bigger, /*strict=*/false);
  std::sort(reverse.unexpected_keys.begin(), reverse.unexpected_keys.end());
  EXPECT_EQ(reverse.unexpected_keys, (std::vector<std::string>{"extra.bias", "extra.weight"}));
  EXPECT_TRUE(reverse.missing_keys.empty());
  fs::remove_all(root);
}

// ckpt_path="hpc": the highest-numbered hpc_ckpt_<n>.ckpt in default_root_dir (by number: 10 after 9,
// whichever was written last), for evaluation and fit alike.
TEST(LoadFromCheckpoint, HpcPathIsTheHighestNumberedRequeueCheckpoint) {
  const fs::path root = fresh_folder("hpc");
  const auto data = tiny_data(8, 2);
  testing::TinyModule two_epochs, one_epoch;
  {
    Trainer writer(quiet().max_epochs(2));
    writer.fit(two_epochs, data);
    writer.save_checkpoint((root / "hpc_ckpt_10.ckpt").string());
  }
  {
    Trainer writer(quiet().max_epochs(1));
    writer.fit(one_epoch, data);
    writer.save_checkpoint((root / "hpc_ckpt_9.ckpt").string());
  }
  testing::TinyModule evaluated;
  Trainer(quiet().default_root_dir(root.string())).validate(evaluated, data, "hpc");
  EXPECT_TRUE(torch::equal(weights_of(evaluated), weights_of(two_epochs))) << "validated with hpc_ckpt_10's weights";

  const auto message = error_of([&] {
    testing::TinyModule none;
    Trainer(quiet().default_root_dir((root / "empty").string())).test(none, data, "hpc");
  });
  EXPECT_NE(message.find("ckpt_path=\"hpc\": no hpc_ckpt_<n>.ckpt in"), std::string::npos) << message;
  fs::remove_all(root);
}

}  // namespace
}  // namespace arc
