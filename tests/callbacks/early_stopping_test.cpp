#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <limits>

namespace arc {
namespace {

using testing::quiet;
using testing::tiny_data;

// Logs a scripted validation score per epoch.
struct Scripted : testing::TinyModule {
  explicit Scripted(std::vector<double> scores) : scores_(std::move(scores)) {}
  void validation_step(Batch&, int64_t) override {
    log("score", scores_[std::min(scores_.size() - 1, static_cast<size_t>(current_epoch()))]);
  }
  std::vector<double> scores_;
};

int64_t epochs_run(std::vector<double> scores, EarlyStoppingOptions options, std::string* reason = nullptr,
                   TrainerOptions trainer_options = quiet()) {
  Scripted module(std::move(scores));
  auto stopper = std::make_shared<EarlyStopping>(options);
  Trainer trainer(trainer_options.max_epochs(20).num_sanity_val_steps(0), {stopper});
  trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
  if (reason != nullptr) *reason = stopper->reason();
  return trainer.current_epoch();
}

TEST(EarlyStopping, StopsAfterPatienceChecksWithoutImprovement) {
  std::string reason;
  EXPECT_EQ(epochs_run({5, 4, 3, 3.5, 3.2, 3.1, 3.0}, EarlyStoppingOptions("score").patience(3), &reason), 6);
  EXPECT_NE(reason.find("did not improve"), std::string::npos) << reason;
}

TEST(EarlyStopping, MinDeltaAndMaxMode) {
  EXPECT_EQ(epochs_run({1, 1.05, 1.08, 1.09}, EarlyStoppingOptions("score").mode("max").min_delta(0.1).patience(2)), 3);
}

TEST(EarlyStopping, ThresholdsAndNonFiniteValuesStopAtOnce) {
  std::string reason;
  EXPECT_EQ(epochs_run({5, 0.5, 0.1}, EarlyStoppingOptions("score").stopping_threshold(1.0), &reason), 2);
  EXPECT_NE(reason.find("stopping threshold"), std::string::npos);
  EXPECT_EQ(epochs_run({5, 50}, EarlyStoppingOptions("score").divergence_threshold(10.0), &reason), 2);
  EXPECT_NE(reason.find("divergence threshold"), std::string::npos);
  EXPECT_EQ(epochs_run({5, std::numeric_limits<double>::quiet_NaN()}, EarlyStoppingOptions("score"), &reason), 2);
  EXPECT_NE(reason.find("not finite"), std::string::npos);
}

TEST(EarlyStopping, MinEpochsStillApplies) {
  EXPECT_EQ(epochs_run({1, 2, 3, 4, 5, 6}, EarlyStoppingOptions("score").patience(1), nullptr, quiet().min_epochs(4)),
            4);
}

TEST(EarlyStopping, UnknownMetricIsAnError) {
  try {
    epochs_run({1}, EarlyStoppingOptions("val_los"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("monitors 'val_los'"), std::string::npos);
  }
}

// Logs a scripted training score per epoch (the epoch's mean), and has no validation data.
struct TrainScripted : testing::TinyModule {
  explicit TrainScripted(std::vector<double> scores) : scores_(std::move(scores)) {}
  torch::Tensor training_step(Batch& batch, int64_t index) override {
    log("train_score", scores_[std::min(scores_.size() - 1, static_cast<size_t>(current_epoch()))],
        LogOptions().on_step(false).on_epoch(true));
    return TinyModule::training_step(batch, index);
  }
  std::vector<double> scores_;
};

// As Lightning's: with validation at each epoch's end or none, the check runs at the training
// epoch's end, so a training metric stops a fit without validation data (it ran all 20 epochs
// before); check_on_train_epoch_end=false waits for validation, which never runs; strict=false
// skips a metric that was not logged instead of failing.
TEST(EarlyStopping, ChecksAtTheTrainingEpochsEndAsLightningDoes) {
  const auto run = [](EarlyStoppingOptions options, std::string* reason = nullptr) {
    TrainScripted module({5, 4, 4.5, 4.6, 4.7, 4.8});
    auto stopper = std::make_shared<EarlyStopping>(options);
    Trainer trainer(quiet().max_epochs(20), {stopper});
    trainer.fit(module, tiny_data(4, 2));
    if (reason != nullptr) *reason = stopper->reason();
    return trainer.current_epoch();
  };
  std::string reason;
  EXPECT_EQ(run(EarlyStoppingOptions("train_score").patience(2), &reason), 4);
  EXPECT_NE(reason.find("train_score did not improve"), std::string::npos) << reason;
  EXPECT_EQ(run(EarlyStoppingOptions("train_score").patience(2).check_on_train_epoch_end(false)), 20);
  EXPECT_EQ(run(EarlyStoppingOptions("val_score").strict(false)), 20);
  try {
    run(EarlyStoppingOptions("val_score"));
    FAIL() << "a metric that was not logged was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("monitors 'val_score', which was not logged by the end of the training epoch (logged: "),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("set strict=false"), std::string::npos) << error.what();
  }
  // Validating twice an epoch, it checks after each validation (patience counts checks: the stop
  // comes in epoch 2), unless told to check at the epoch's end (the stop comes after epoch 3).
  const auto twice = quiet().val_check_interval(BatchAmount::fraction(0.5));
  EXPECT_EQ(epochs_run({5, 4, 4.5, 4.6}, EarlyStoppingOptions("score").patience(2), nullptr, twice), 3);
  EXPECT_EQ(epochs_run({5, 4, 4.5, 4.6}, EarlyStoppingOptions("score").patience(2).check_on_train_epoch_end(true),
                       nullptr, twice),
            4);
}

}  // namespace
}  // namespace arc
