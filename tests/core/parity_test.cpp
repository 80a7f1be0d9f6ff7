// Parity with a hand-written LibTorch loop (as Lightning's parity suite), and learning: the
// canonical MLP reaches the accuracy WORKLOAD.md states after one epoch.
#include <arc/apps/examples/canonical_data.h>
#include <arc/apps/examples/classifier.h>
#include <arc/apps/examples/hand_loop.h>
#include <arc/apps/examples/workload.h>
#include <arc/cli/detail/run_report.h>
#include "support/tiny_module.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

class LossRecorder : public Callback {
 public:
  std::string state_key() const override { return "LossRecorder"; }
  void on_train_batch_end(Trainer&, TrainModule&, const torch::Tensor& loss, Batch&, int64_t) override {
    losses.push_back(loss.item<float>());
  }
  std::vector<float> losses;
};

struct Outcome {
  std::vector<float> losses;
  std::string digest;
  Metrics metrics;
};

template <typename Module>
Outcome train_with_trainer(int64_t batches) {
  Module module(Config(nlohmann::json::object(), "module"));
  examples::CanonicalData data(Config(nlohmann::json::object(), "data"));
  auto recorder = std::make_shared<LossRecorder>();
  auto options = testing::quiet().max_epochs(1).deterministic(true);
  if (batches > 0)
    options.limit_train_batches(BatchAmount::count(batches)).limit_val_batches(BatchAmount::fraction(0.0));
  Trainer trainer(options, {recorder});
  trainer.fit(module, data);
  return {recorder->losses, cli::parameter_sha256(module), trainer.callback_metrics()};
}

template <typename Module>
Outcome train_by_hand(int64_t batches) {
  torch::set_num_threads(1);
  Module module(Config(nlohmann::json::object(), "module"));
  const auto& all = workload::data();
  auto order = workload::epoch_order(workload::kTrainSamples, 0);
  if (batches > 0) order.resize(static_cast<size_t>(batches * 64));
  const auto losses = examples::train_by_hand(
      module, [&](const torch::Tensor& x) { return module.forward(x); }, all.x.slice(0, 0, workload::kTrainSamples),
      all.y.slice(0, 0, workload::kTrainSamples), order, 64, 0.05, 0.9);
  return {losses, cli::parameter_sha256(module), {}};
}

TEST(Parity, MlpEpochMatchesHandWrittenLoopBitForBitAndLearns) {
  const auto trainer = train_with_trainer<examples::MlpClassifier>(0);
  const auto hand = train_by_hand<examples::MlpClassifier>(0);
  ASSERT_EQ(trainer.losses.size(), 938u);
  EXPECT_EQ(trainer.losses, hand.losses);
  EXPECT_EQ(trainer.digest, hand.digest);
  // WORKLOAD.md: after one epoch the MLP sits around 0.86 (the best achievable is about 0.90).
  EXPECT_GT(trainer.metrics.at("val_acc"), 0.84);
  EXPECT_LT(trainer.metrics.at("val_acc"), 0.91);
  EXPECT_LT(trainer.metrics.at("val_loss"), 0.5);
}

TEST(Parity, CnnStepsMatchHandWrittenLoopBitForBit) {
  const auto trainer = train_with_trainer<examples::CnnClassifier>(60);
  const auto hand = train_by_hand<examples::CnnClassifier>(60);
  ASSERT_EQ(trainer.losses.size(), 60u);
  EXPECT_EQ(trainer.losses, hand.losses);
  EXPECT_EQ(trainer.digest, hand.digest);
}

}  // namespace
}  // namespace arc
