// Row 9 of issue 18: BasePredictionWriter, progress for validate/test/predict, ModelSummary's
// max_depth, log(..., LogOptions().rank_zero_only(true)) and on_step values of evaluation reaching the loggers.
#include "support/command.h"
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

namespace arc {
namespace {

using testing::error_of;
using testing::occurrences;
using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

class Collects : public BasePredictionWriter {
 public:
  using BasePredictionWriter::BasePredictionWriter;
  void write_on_batch_end(Trainer&, TrainModule&, const torch::Tensor& prediction,
                          const std::vector<int64_t>& batch_indices, const Batch&, int64_t batch_idx,
                          int64_t dataloader_idx) override {
    batches.emplace_back(prediction, batch_indices);
    batch_ids.push_back(batch_idx);
    EXPECT_EQ(dataloader_idx, 0);
  }
  void write_on_epoch_end(Trainer&, TrainModule&, const std::vector<torch::Tensor>& predictions,
                          const std::vector<std::vector<int64_t>>& batch_indices) override {
    ASSERT_EQ(predictions.size(), batch_indices.size());
    for (size_t i = 0; i < predictions.size(); ++i) at_end.emplace_back(predictions[i], batch_indices[i]);
    ++ends;
  }
  std::vector<std::pair<torch::Tensor, std::vector<int64_t>>> batches, at_end;
  std::vector<int64_t> batch_ids;
  int64_t ends = 0;
};

// Every prediction belongs to the sample its index names, and every sample comes once.
void expect_in_place(TinyModule& module, const std::vector<std::pair<torch::Tensor, std::vector<int64_t>>>& written) {
  const auto x = torch::arange(40, torch::kFloat).reshape({10, 4}).div(40.0);
  std::vector<int64_t> seen;
  for (const auto& [prediction, indices] : written) {
    const auto expected = module.linear(x.index_select(0, torch::tensor(indices)));
    EXPECT_TRUE(torch::allclose(prediction, expected));
    seen.insert(seen.end(), indices.begin(), indices.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(10);
  for (int64_t i = 0; i < 10; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_EQ(seen, all);
}

TEST(PredictionWriter, WritesEachBatchAndOrTheEpochWithTheSamplesIndices) {
  auto data = tiny_data(10, 4);
  data.options.shuffle(true);
  for (const auto interval : {WriteInterval::batch, WriteInterval::epoch, WriteInterval::batch_and_epoch}) {
    TinyModule module;
    auto writer = std::make_shared<Collects>(interval);
    Trainer trainer(quiet().seed(7), {writer});
    const auto returned = trainer.predict(module, data);
    ASSERT_EQ(returned.size(), 3u);
    torch::NoGradGuard no_grad;
    if (interval != WriteInterval::epoch) {
      EXPECT_EQ(writer->batch_ids, (std::vector<int64_t>{0, 1, 2}));
      expect_in_place(module, writer->batches);
    } else {
      EXPECT_TRUE(writer->batches.empty());
    }
    if (interval != WriteInterval::batch) {
      EXPECT_EQ(writer->ends, 1);
      expect_in_place(module, writer->at_end);
    } else {
      EXPECT_EQ(writer->ends, 0);
    }
  }
  // Shuffled: the first batch is not samples 0-3.
  TinyModule module;
  auto writer = std::make_shared<Collects>(WriteInterval::batch);
  Trainer(quiet().seed(7), {writer}).predict(module, data);
  EXPECT_NE(writer->batches.front().second, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(PredictionWriter, AWriterThatDoesNotWriteWhatItsIntervalNeedsIsAnError) {
  TinyModule module;
  Trainer trainer(quiet(), {std::make_shared<BasePredictionWriter>(WriteInterval::epoch)});
  const auto message = error_of([&] { trainer.predict(module, tiny_data(4, 2)); });
  EXPECT_NE(message.find("does not override write_on_epoch_end"), std::string::npos) << message;
}

// The lines a ProgressBar drawing every batch writes when `run` runs.
std::string progress_of(const std::function<void(Trainer&)>& run) {
  ::testing::internal::CaptureStderr();  // first: the bar asks whether standard error is a terminal
  Trainer trainer(quiet().max_epochs(1), {std::make_shared<ProgressBar>(1)});
  run(trainer);
  return ::testing::internal::GetCapturedStderr();
}

TEST(ProgressBar, ShowsValidationTestAndPredictProgress) {
  TinyModule module;
  const auto validated = progress_of([&](Trainer& t) { t.validate(module, tiny_data(6, 2)); });
  EXPECT_NE(validated.find("Validation: 1/3 ["), std::string::npos) << validated;
  EXPECT_NE(validated.find("Validation: 3/3 ["), std::string::npos) << validated;
  // Two loaders: counted as one run of 3 + 1 batches, drawn after the last one and ended.
  const auto both = progress_of([&](Trainer& t) { t.validate(module, {tiny_data(6, 2), tiny_data(2, 2)}); });
  EXPECT_EQ(occurrences(both, "Validation: 4/4 ["), 2) << both;
  EXPECT_NE(progress_of([&](Trainer& t) { t.test(module, tiny_data(6, 2)); }).find("Testing: 3/3 ["),
            std::string::npos);
  EXPECT_NE(progress_of([&](Trainer& t) { t.predict(module, tiny_data(6, 2)); }).find("Predicting: 3/3 ["),
            std::string::npos);
  // In fit: a line per validation run, none for the sanity check.
  const auto fitted = progress_of([&](Trainer& t) { t.fit(module, tiny_data(4, 2), tiny_data(2, 2)); });
  EXPECT_NE(fitted.find("Epoch 0: 2/2 ["), std::string::npos) << fitted;
  EXPECT_EQ(occurrences(fitted, "Validation: 1/1 ["), 2) << fitted;  // drawn after its batch, then ended
}

struct SlowSteps : TinyModule {
  torch::Tensor training_step(Batch& batch, int64_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return TinyModule::training_step(batch, i);
  }
};

// A resumed epoch's rate counts only the batches this run did: resumed after batch 2 of 4, the
// bar's 50 ms batches go at 20 it/s or slower (counting the 2 earlier ones gave twice the rate);
// resumed with none left, the rate and time left are unknown, not the batches over no time.
TEST(ProgressBar, AResumedEpochCountsOnlyItsOwnBatchesInTheRate) {
  const auto dir = arc::testing::process_scratch() / "resumed_bar";
  TinyModule first;
  Trainer(quiet().max_epochs(1),
          {std::make_shared<ModelCheckpoint>(
              ModelCheckpointOptions().dirpath(dir.string()).every_n_train_steps(2).save_top_k(-1))})
      .fit(first, tiny_data(8, 2), tiny_data(2, 2));
  const auto resumed_from = [&](const std::string& name) {
    SlowSteps module;
    return progress_of([&](Trainer& t) { t.fit(module, tiny_data(8, 2), tiny_data(2, 2), (dir / name).string()); });
  };
  const auto halfway = resumed_from("epoch=0-step=2.ckpt");
  EXPECT_EQ(halfway.find("Epoch 0: 2/4 ["), std::string::npos) << halfway;
  const auto at = halfway.find("Epoch 0: 4/4 [");
  ASSERT_NE(at, std::string::npos) << halfway;
  const auto rate_at = halfway.find(", ", at) + 2;
  EXPECT_LE(std::stod(halfway.substr(rate_at)), 20.0) << halfway;
  const auto at_end = resumed_from("epoch=0-step=4.ckpt");
  EXPECT_NE(at_end.find("Epoch 0: 4/4 [00:00<?, ? it/s]"), std::string::npos) << at_end;
  std::filesystem::remove_all(dir);
}

// Lightning's refresh_rate: a line every n batches and at the epoch's end; 0 draws nothing (it
// divided by zero before); a negative one is an error.
TEST(ProgressBar, RefreshRateChoosesTheBatchesDrawnAndZeroTurnsItOff) {
  TinyModule module;
  const auto drawn_with = [&](std::optional<int64_t> refresh_rate) {
    ::testing::internal::CaptureStderr();
    Trainer trainer(quiet().max_epochs(1), {std::make_shared<ProgressBar>(refresh_rate)});
    trainer.fit(module, tiny_data(14, 2), tiny_data(2, 2));
    return ::testing::internal::GetCapturedStderr();
  };
  const auto drawn = drawn_with(3);
  EXPECT_NE(drawn.find("Epoch 0: 3/7 ["), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("Epoch 0: 6/7 ["), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("Epoch 0: 7/7 ["), std::string::npos) << drawn;
  EXPECT_EQ(drawn.find("Epoch 0: 4/7 ["), std::string::npos) << drawn;
  const auto off = drawn_with(0);
  EXPECT_EQ(off.find("Epoch"), std::string::npos) << off;
  EXPECT_EQ(off.find("Validation"), std::string::npos) << off;
  const auto message = error_of([] { ProgressBar(-1); });
  EXPECT_NE(message.find("refresh_rate is -1"), std::string::npos) << message;
}

// Lightning's TQDMProgressBar and RichProgressBar are ProgressBars; what only tqdm or Rich does is
// refused with the key, and RichModelSummary is a ModelSummary.
TEST(ProgressBar, LightningsBarsAndRichModelSummaryFromAConfig) {
  const auto one = [](const nlohmann::json& entry) { return callbacks_from_json(entry, "trainer.callbacks").at(0); };
  EXPECT_NE(std::dynamic_pointer_cast<ProgressBar>(one({{"class_path", "TQDMProgressBar"}})), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<ProgressBar>(
                one({{"class_path", "lightning.pytorch.callbacks.RichProgressBar"},
                     {"init_args", {{"refresh_rate", 0}, {"leave", true}, {"console_kwargs", nullptr}}}})),
            nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<ModelSummary>(
                one({{"class_path", "RichModelSummary"}, {"init_args", {{"max_depth", 2}}}})),
            nullptr);
  const auto moved = error_of([&] {
    one({{"class_path", "TQDMProgressBar"}, {"init_args", {{"process_position", 2}}}});
  });
  EXPECT_NE(moved.find("trainer.callbacks.init_args.process_position' is 2"), std::string::npos) << moved;
  EXPECT_NE(moved.find("leave it 0"), std::string::npos) << moved;
  const auto rich = error_of([&] {
    one({{"class_path", "RichProgressBar"}, {"init_args", {{"console_kwargs", {{"record", true}}}}}});
  });
  EXPECT_NE(rich.find("console_kwargs' is {\"record\":true}"), std::string::npos) << rich;
  const auto negative = error_of([&] {
    one({{"class_path", "TQDMProgressBar"}, {"init_args", {{"refresh_rate", -2}}}});
  });
  EXPECT_NE(
      negative.find("trainer.callbacks.init_args.refresh_rate (TQDMProgressBar): ProgressBar: refresh_rate is -2"),
      std::string::npos)
      << negative;
}

class Nested : public TinyModule {
 public:
  Nested() { encoder = register_module("encoder", torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::ReLU())); }
  torch::nn::Sequential encoder{nullptr};
};

TEST(ModelSummary, MaxDepthChoosesHowDeepTheTableGoes) {
  Nested module;
  const auto top = ModelSummary::summarize(module, 1);
  EXPECT_NE(top.find("| encoder "), std::string::npos) << top;
  EXPECT_EQ(top.find("encoder.0"), std::string::npos) << top;
  const auto all = ModelSummary::summarize(module, -1);
  EXPECT_NE(all.find("| encoder.0 "), std::string::npos) << all;
  EXPECT_NE(all.find("| encoder.1 "), std::string::npos) << all;
  EXPECT_NE(all.find("| Linear "), std::string::npos) << all;
  EXPECT_NE(error_of([] { ModelSummary(-2); }).find("max_depth is -2"), std::string::npos);
}

class LogsFromRankZero : public TinyModule {
 public:
  explicit LogsFromRankZero(bool sync) : sync_(sync) {}
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    log("zero_only", 3.0, LogOptions().on_epoch(true).sync_dist(sync_).rank_zero_only(true));
    return TinyModule::training_step(batch, batch_idx);
  }

 private:
  bool sync_;
};

TEST(Logging, RankZeroOnlyValuesComeFromRankZeroAndAreNeverSynchronized) {
  LogsFromRankZero module(false);
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module, tiny_data(4, 2));
  EXPECT_DOUBLE_EQ(trainer.callback_metrics().at("zero_only_epoch"), 3.0);
  LogsFromRankZero synced(true);
  const auto message = error_of([&] { Trainer(quiet().max_epochs(1)).fit(synced, tiny_data(4, 2)); });
  EXPECT_NE(message.find("rank_zero_only and sync_dist contradict each other"), std::string::npos) << message;
}

// A logger that keeps what it was sent.
class Records : public Logger {
 public:
  std::string name() const override { return "Records"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows.emplace_back(step, metrics);
  }
  // (step, value) of every row that has `metric`.
  std::vector<std::pair<int64_t, double>> of(const std::string& metric) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& [step, metrics] : rows)
      if (metrics.count(metric) > 0) out.emplace_back(step, metrics.at(metric));
    return out;
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

class LogsEveryValidationBatch : public TinyModule {
 public:
  void validation_step(Batch& batch, int64_t batch_idx) override {
    log("seen", static_cast<double>(batch_idx), LogOptions().on_step(true));
    TinyModule::validation_step(batch, batch_idx);
  }
};

TEST(Logging, OnStepValuesOfValidationReachTheLoggersAfterEveryBatch) {
  LogsEveryValidationBatch module;
  auto records = std::make_shared<Records>();
  Trainer trainer(quiet(), {}, {records});
  trainer.validate(module, tiny_data(6, 2));
  using Points = std::vector<std::pair<int64_t, double>>;
  EXPECT_EQ(records->of("seen_step"), (Points{{0, 0.0}, {1, 1.0}, {2, 2.0}}));
  EXPECT_EQ(records->of("seen_epoch"), (Points{{0, 1.0}}));  // at the global step, 0 before any fit

  // In fit, the sanity check's batches are not logged.
  LogsEveryValidationBatch fitted;
  auto during_fit = std::make_shared<Records>();
  Trainer fitting(quiet().max_epochs(1).num_sanity_val_steps(2), {}, {during_fit});
  fitting.fit(fitted, tiny_data(4, 2), tiny_data(6, 2));
  EXPECT_EQ(during_fit->of("seen_step").size(), 3u);
}

}  // namespace
}  // namespace arc
