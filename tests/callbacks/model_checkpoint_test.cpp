// ModelCheckpoint: the best k by a monitored metric, file names and versions, when it saves (epochs,
// steps, the clock), weights only, last.ckpt and resuming from it, NaN scores.
#include "support/errors.h"
#include "support/scratch.h"
#include "support/stateful_module.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

namespace arc {
namespace {

using testing::fresh_folder;
using testing::quiet;
using testing::resume_options;
using testing::shuffled;
using testing::Stateful;
using testing::StopAfter;
using testing::tiny_data;
using testing::TinyModule;
using testing::weights_of;

namespace fs = std::filesystem;

TEST(ModelCheckpoint, KeepsTheBestKByTheMonitoredMetric) {
  const auto dir = fresh_folder("topk");
  struct Scripted : TinyModule {
    std::vector<double> scores{3.0, 1.0, 4.0, 0.5, 2.0};
    void validation_step(Batch&, int64_t) override { log("score", scores[static_cast<size_t>(current_epoch())]); }
  } module;
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().dirpath(dir).monitor("score").save_top_k(2).save_last(true).filename(
          "{epoch}-{score:.1f}"));
  Trainer trainer(quiet().max_epochs(5).enable_checkpointing(true).num_sanity_val_steps(0), {checkpoint});
  trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.insert(entry.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"epoch=1-score=1.0.ckpt", "epoch=3-score=0.5.ckpt", "last.ckpt"}));
  EXPECT_EQ(checkpoint->best_model_path(), dir + "/epoch=3-score=0.5.ckpt");
  EXPECT_DOUBLE_EQ(*checkpoint->best_model_score(), 0.5);
  TinyModule best;
  Trainer(quiet()).validate(best, tiny_data(2, 2), checkpoint->best_model_path());
  // As Lightning's, a kept file's state counts it, and names it when it is the best.
  const auto state = CheckpointReader::read_meta(checkpoint->best_model_path())["callbacks"][checkpoint->state_key()];
  EXPECT_EQ(state["best_model_path"], checkpoint->best_model_path());
  EXPECT_TRUE(state["kept"].contains(checkpoint->best_model_path())) << state.dump();
  // A later run's Trainer with the same callback finds that best through the newest checkpoint (as
  // `arc test --ckpt best` after `arc fit`); one that monitors something else does not.
  const auto options = ModelCheckpointOptions().dirpath(dir).monitor("score").save_top_k(2);
  TinyModule later;
  Trainer(quiet(), {std::make_shared<ModelCheckpoint>(options)}).validate(later, tiny_data(2, 2), "best");
  EXPECT_TRUE(torch::equal(weights_of(later), weights_of(best)));
  const auto other = error_of([&] {
    Trainer(quiet(), {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(options).monitor("loss"))})
        .validate(later, tiny_data(2, 2), "best");
  });
  EXPECT_NE(other.find("ckpt_path=\"best\": no ModelCheckpoint of this Trainer saved a best checkpoint in its fit, "
                       "and no checkpoint in './checkpoints' (or a ModelCheckpoint's "
                       "dirpath) holds the state of the same ModelCheckpoint (monitor, mode) naming one; give the "
                       "ModelCheckpoint of the run that trained, or pass a file path"),
            std::string::npos)
      << other;
  // "last" with no last.ckpt anywhere says where it looked.
  const auto no_last = error_of(
      [&] { Trainer(quiet().logger(true).default_root_dir(dir + "/empty")).validate(later, tiny_data(2, 2), "last"); });
  EXPECT_NE(no_last.find("ckpt_path=\"last\": no last.ckpt was found in '" + dir + "/empty" +
                         "/lightning_logs/version_*/checkpoints' (or a ModelCheckpoint's dirpath); train with "
                         "ModelCheckpoint save_last"),
            std::string::npos)
      << no_last;
  fs::remove_all(dir);
}

// A monitored metric or a filename field that nothing logged fails the fit, naming what was logged
// (a misspelt name is then plain to see, and the nearest is suggested), as Lightning's "could not
// find the monitored key" does.
TEST(ModelCheckpoint, AMetricNotLoggedFailsNamingTheLoggedOnes) {
  const auto dir = fresh_folder("not_logged");
  const auto fit_error = [&](ModelCheckpointOptions options) {
    TinyModule module;
    Trainer trainer(quiet().max_epochs(1).enable_checkpointing(true).num_sanity_val_steps(0),
                    {std::make_shared<ModelCheckpoint>(options.dirpath(dir))});
    return error_of([&] { trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2)); });
  };
  const auto monitored = fit_error(ModelCheckpointOptions().monitor("val_los"));
  EXPECT_NE(monitored.find("ModelCheckpoint monitors 'val_los', which was not logged (available metrics: epoch, step, "
                           "train_loss, val_loss; did you mean 'val_loss'?); log it"),
            std::string::npos)
      << monitored;
  const auto named = fit_error(ModelCheckpointOptions().filename("{epoch}-{val_los:.2f}"));
  EXPECT_NE(named.find("ModelCheckpoint filename uses '{val_los}', which was not logged (available metrics: epoch, "
                       "step, train_loss, val_loss; did you mean 'val_loss'?); log it or change the filename"),
            std::string::npos)
      << named;
  fs::remove_all(dir);
}

// A name that a file has already gets "-v1", "-v2" (another run's files stay), unless
// enable_version_counter is off; save_on_train_epoch_end moves the epoch's save from after each
// validation to the training epoch's end, or (false) leaves none where nothing validates.
TEST(ModelCheckpoint, VersionCounterAndSaveOnTrainEpochEnd) {
  const auto dir = fresh_folder("versions");
  const auto saved_files = [&](ModelCheckpointOptions options, TrainerOptions trainer_options, bool validate = true) {
    fs::remove_all(dir);
    for (int run = 0; run < 2; ++run) {
      TinyModule module;
      Trainer trainer(trainer_options.enable_checkpointing(true).num_sanity_val_steps(0),
                      {std::make_shared<ModelCheckpoint>(options.dirpath(dir))});
      if (validate)
        trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
      else
        trainer.fit(module, tiny_data(4, 2));
    }
    std::set<std::string> files;
    if (fs::exists(dir))
      for (const auto& entry : fs::directory_iterator(dir)) files.insert(entry.path().filename().string());
    return files;
  };
  const auto fixed = ModelCheckpointOptions().filename("fixed").save_top_k(-1);
  EXPECT_EQ(saved_files(fixed, quiet().max_epochs(2)),
            (std::set<std::string>{"fixed.ckpt", "fixed-v1.ckpt", "fixed-v2.ckpt", "fixed-v3.ckpt"}));
  EXPECT_EQ(saved_files(ModelCheckpointOptions(fixed).enable_version_counter(false), quiet().max_epochs(2)),
            (std::set<std::string>{"fixed.ckpt"}));
  const auto by_step = ModelCheckpointOptions().filename("{step}").save_top_k(-1).enable_version_counter(false);
  const auto twice_an_epoch = quiet().max_epochs(2).val_check_interval(BatchAmount::fraction(0.5));
  EXPECT_EQ(saved_files(by_step, twice_an_epoch),
            (std::set<std::string>{"step=1.ckpt", "step=2.ckpt", "step=3.ckpt", "step=4.ckpt"}));
  EXPECT_EQ(saved_files(ModelCheckpointOptions(by_step).save_on_train_epoch_end(true), twice_an_epoch),
            (std::set<std::string>{"step=2.ckpt", "step=4.ckpt"}));
  EXPECT_EQ(saved_files(ModelCheckpointOptions(by_step).save_on_train_epoch_end(false), quiet().max_epochs(2), false),
            (std::set<std::string>{}));
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, EveryNTrainStepsAndDefaultFolder) {
  const auto root = fresh_folder("steps");
  TinyModule module;
  auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().every_n_train_steps(2).save_top_k(-1));
  Trainer trainer(quiet().max_steps(6).default_root_dir(root).enable_checkpointing(true), {checkpoint});
  trainer.fit(module, tiny_data(8, 2));
  for (const int step : {2, 4, 6})
    EXPECT_TRUE(fs::exists(root + "/checkpoints/epoch=" + std::to_string((step - 1) / 4) +
                           "-step=" + std::to_string(step) + ".ckpt"))
        << step;
  fs::remove_all(root);
}

TEST(ModelCheckpoint, TrainTimeIntervalSavesByTheClock) {
  const auto dir = fresh_folder("time");
  struct Slow : TinyModule {
    torch::Tensor training_step(Batch& batch, int64_t index) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      return TinyModule::training_step(batch, index);
    }
  } module;
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions().dirpath(dir).train_time_interval(0.1).every_n_epochs(0).save_top_k(-1));
  Trainer(quiet().max_steps(12).enable_checkpointing(true), {checkpoint}).fit(module, tiny_data(24, 2));
  std::vector<int64_t> steps;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    steps.push_back(std::stoll(name.substr(name.find("step=") + 5)));
  }
  std::sort(steps.begin(), steps.end());
  // 12 steps of >= 30 ms with a save due every 100 ms: the first by step 4 and the next ones at most 4
  // steps apart (4 x 30 ms >= 100 ms, however loaded the machine), and not at every step unless
  // every step took 100 ms, over 3x its sleep (the only bound that load could break, with that margin).
  ASSERT_GE(steps.size(), 3u);
  EXPECT_LT(steps.size(), 12u);
  EXPECT_LE(steps.front(), 4);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LE(steps[i] - steps[i - 1], 4);
  fs::remove_all(dir);
}

// As Lightning's default every_n_epochs: with train_time_interval, no save at the epochs' ends.
TEST(ModelCheckpoint, TrainTimeIntervalTurnsTheEpochSavesOff) {
  const auto dir = fresh_folder("time_only");
  TinyModule module;
  auto checkpoint =
      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir).train_time_interval(3600).save_top_k(-1));
  Trainer(quiet().max_epochs(2).enable_checkpointing(true), {checkpoint}).fit(module, tiny_data(4, 2));
  EXPECT_TRUE(checkpoint->best_model_path().empty()) << checkpoint->best_model_path();
  EXPECT_TRUE(!fs::exists(dir) || fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, SaveWeightsOnlyLeavesOutTrainingState) {
  const auto dir = fresh_folder("weights_only");
  TinyModule module;
  auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir).save_weights_only(true));
  Trainer(quiet().max_epochs(1).enable_checkpointing(true), {checkpoint}).fit(module, tiny_data(4, 2));
  const CheckpointReader saved(checkpoint->best_model_path());
  EXPECT_TRUE(saved.meta().at("weights_only").get<bool>());
  EXPECT_FALSE(saved.contains("optimizer_0"));
  EXPECT_FALSE(saved.contains("rng_cpu"));
  EXPECT_TRUE(saved.contains("model/linear.weight"));
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, DefaultCheckpointingWritesLastAndResumesFromIt) {
  const auto root = fresh_folder("default");
  TinyModule first;
  Trainer trainer(quiet().max_epochs(2).enable_checkpointing(true).default_root_dir(root));
  // As Lightning's, "last" before there is one starts afresh, so that every run of a job may pass it.
  ::testing::internal::CaptureStderr();
  trainer.fit(first, tiny_data(4, 2), {}, "last");
  const auto said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("ckpt_path=\"last\": no last.ckpt was found in '" + root +
                      "/checkpoints' (or a ModelCheckpoint's dirpath), so fit starts afresh"),
            std::string::npos)
      << said;
  EXPECT_EQ(first.counts["training_step"], 4);
  EXPECT_TRUE(fs::exists(root + "/checkpoints/last.ckpt"));
  // Lightning's trainer.checkpoint_callback: the default one, which says where it wrote.
  ASSERT_NE(trainer.callback<ModelCheckpoint>(), nullptr);
  EXPECT_EQ(trainer.callback<ModelCheckpoint>()->last_model_path(), root + "/checkpoints/last.ckpt");
  EXPECT_EQ(trainer.callback<ModelCheckpoint>()->best_model_path(), root + "/checkpoints/epoch=1-step=4.ckpt");
  EXPECT_EQ(trainer.callback<EarlyStopping>(), nullptr);
  TinyModule second;
  Trainer more(quiet().max_epochs(3).enable_checkpointing(true).default_root_dir(root));
  more.fit(second, tiny_data(4, 2), {}, "last");
  EXPECT_EQ(second.counts["training_step"], 2);  // only the third epoch ran
  EXPECT_EQ(more.global_step(), 6);
  fs::remove_all(root);
}

// ModelCheckpoint saves after the epoch's validation, before the epoch ends: the fit resumed from
// that last.ckpt ends the epoch without validating again, and must not save there for want of the
// monitored value.
TEST(ModelCheckpoint, ResumingFromTheLastCheckpointOfAMonitoredRunTrainsOn) {
  const auto root = fresh_folder("monitored_last");
  const auto options = [&] {
    return ModelCheckpointOptions().dirpath(root).monitor("val_loss").save_last(true).save_top_k(-1);
  };
  TinyModule first;
  Trainer(quiet().max_epochs(2).enable_checkpointing(true), {std::make_shared<ModelCheckpoint>(options())})
      .fit(first, tiny_data(4, 2), tiny_data(4, 2));
  TinyModule second;
  auto checkpoint = std::make_shared<ModelCheckpoint>(options());
  Trainer more(quiet().max_epochs(3).enable_checkpointing(true), {checkpoint});
  more.fit(second, tiny_data(4, 2), tiny_data(4, 2), root + "/last.ckpt");
  EXPECT_EQ(second.counts["training_step"], 2);  // only the third epoch ran
  EXPECT_EQ(second.counts["validation_step"], 2);
  EXPECT_TRUE(fs::exists(root + "/epoch=2-step=6.ckpt"));
  EXPECT_FALSE(checkpoint->best_model_path().empty());
  fs::remove_all(root);
}

// That checkpoint comes before the epoch's end, where EarlyStopping and ReduceLROnPlateau read the
// validation's val_loss: the resumed fit reads the value the checkpoint kept, and ends as the fit
// that never stopped (the rate halved at the same epochs, stopped at the same one).
TEST(ModelCheckpoint, AFitResumedAtAnEpochsEndMonitorsThatEpochsValidation) {
  struct Plateau : Stateful {  // weights that start alike
    std::vector<OptimizerConfig> configure_optimizers() override {
      auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05));
      auto plateau = std::make_shared<ReduceLROnPlateau>(*sgd, ReduceLROnPlateau::Mode::min, 0.5, 0, 0.3);
      return {OptimizerConfig(sgd, SchedulerConfig{plateau, Interval::epoch, 1, "val_loss"})};
    }
  };
  const auto root = fresh_folder("monitored_end");
  const auto fit = [&](Plateau& module, int64_t epochs, const std::string& ckpt) {
    Trainer trainer(quiet().max_epochs(epochs).seed(5).enable_checkpointing(true),
                    {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(root).save_last(true)),
                     std::make_shared<EarlyStopping>(EarlyStoppingOptions("val_loss").patience(2).min_delta(0.01))});
    trainer.fit(module, shuffled(), tiny_data(6, 2), ckpt);
    return std::make_pair(trainer.current_epoch(),
                          trainer.optimizer_configs().front().optimizer->param_groups()[0].options().get_lr());
  };
  Plateau whole, first, resumed;
  const auto [whole_epochs, whole_lr] = fit(whole, 40, "");
  fs::remove_all(root);
  fit(first, 2, "");
  const auto [epochs, lr] = fit(resumed, 40, root + "/last.ckpt");
  EXPECT_LT(whole_epochs, 40) << "EarlyStopping ends it";
  EXPECT_LT(whole_lr, 0.05) << "the plateau lowered the rate";
  EXPECT_EQ(epochs, whole_epochs);
  EXPECT_EQ(lr, whole_lr);
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(whole)));
  fs::remove_all(root);
}

// A NaN monitored value ranks last, as in Lightning, and a fit resumed from a checkpoint that
// keeps it (as +inf) goes on: JSON has no infinity, which the file keeps as a string.
TEST(ModelCheckpoint, ANanScoreRanksLastAndItsCheckpointResumes) {
  struct NanOnce : TinyModule {
    void validation_step(Batch&, int64_t) override {
      const int64_t epoch = current_epoch();
      log("val_loss", epoch == 1 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(epoch + 1));
    }
  };
  const auto root = fresh_folder("nan_score");
  const auto fit = [&](int64_t epochs, const std::string& ckpt) {
    auto checkpoint = std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions().dirpath(root).monitor("val_loss").save_top_k(2).save_last(true));
    NanOnce module;
    Trainer(quiet().max_epochs(epochs).enable_checkpointing(true), {checkpoint})
        .fit(module, tiny_data(4, 2), tiny_data(4, 2), ckpt);
    return checkpoint;
  };
  fit(2, "");  // keeps epoch 0 (1.0) and epoch 1 (NaN, ranked as +inf)
  const auto checkpoint = fit(4, root + "/last.ckpt");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(root)) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"epoch=2-step=6.ckpt", "epoch=3-step=8.ckpt", "last.ckpt"}));
  EXPECT_EQ(checkpoint->best_model_path(), root + "/epoch=3-step=8.ckpt");
  fs::remove_all(root);
}

// What last.ckpt is after each epoch's save: the name it links to, or "file".
struct LastSeen : Callback {
  explicit LastSeen(std::string last) : last(std::move(last)) {}
  std::string state_key() const override { return "LastSeen"; }
  void on_train_epoch_end(Trainer&, TrainModule&) override {
    seen.push_back(fs::is_symlink(last) ? fs::read_symlink(last).string() : "file");
  }
  std::string last;
  std::vector<std::string> seen;
};

// save_last "link": last.ckpt links to the file each save kept (relative, so the folder can move),
// and is a file of its own when a save kept none; the replaced files go. The same with the saves
// written in the background.
TEST(ModelCheckpoint, SaveLastLinkPointsAtEachKeptFileAndIsAFileWhenNoneWasKept) {
  const auto dir = fresh_folder("link");
  struct Scripted : TinyModule {
    std::vector<double> scores{3.0, 1.0, 4.0, 2.0, 0.5};
    void validation_step(Batch&, int64_t) override { log("score", scores[static_cast<size_t>(current_epoch())]); }
  };
  for (const bool async : {false, true}) {
    fs::remove_all(dir);
    Scripted module;
    auto seen = std::make_shared<LastSeen>(dir + "/last.ckpt");
    const auto options = ModelCheckpointOptions().dirpath(dir).monitor("score").save_top_k(2).save_last("link");
    auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(options).filename("{epoch}"));
    Trainer trainer(quiet().max_epochs(5).enable_checkpointing(true).num_sanity_val_steps(0).async_checkpointing(async),
                    {checkpoint, seen});
    trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
    // With saves in the background, an epoch's end may come before its link: the link waits for its file.
    if (!async) {
      EXPECT_EQ(seen->seen,
                (std::vector<std::string>{"epoch=0.ckpt", "epoch=1.ckpt", "file", "epoch=3.ckpt", "epoch=4.ckpt"}));
    }
    std::set<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) files.insert(entry.path().filename().string());
    EXPECT_EQ(files, (std::set<std::string>{"epoch=1.ckpt", "epoch=4.ckpt", "last.ckpt"})) << "async " << async;
    ASSERT_TRUE(fs::is_symlink(dir + "/last.ckpt"));
    EXPECT_EQ(fs::read_symlink(dir + "/last.ckpt"), "epoch=4.ckpt");
    // "last" resumes through the link.
    TinyModule resumed;
    Trainer again(quiet().max_epochs(6).enable_checkpointing(true).num_sanity_val_steps(0),
                  {std::make_shared<ModelCheckpoint>(options)});
    again.fit(resumed, tiny_data(4, 2), tiny_data(2, 2), "last");
    EXPECT_EQ(again.current_epoch(), 6);
  }
  // In a config: true, false or "link".
  const auto built = callbacks_from_json(
      nlohmann::json::parse(R"([{"class_path": "ModelCheckpoint", "init_args": {"save_last": "link"}}])"), "callbacks");
  EXPECT_TRUE(std::dynamic_pointer_cast<ModelCheckpoint>(built.at(0))->options().save_last().link());
  const auto wrong = error_of([] {
    callbacks_from_json(
        nlohmann::json::parse(R"([{"class_path": "ModelCheckpoint", "init_args": {"save_last": "linked"}}])"),
        "callbacks");
  });
  EXPECT_NE(wrong.find("ModelCheckpoint save_last must be true, false or \"link\", got \"linked\""), std::string::npos)
      << wrong;
  fs::remove_all(dir);
}

// save_on_exception: a fit that fails after training a step leaves a checkpoint of where it stopped,
// named as the saves are, beside the top k (and last.ckpt), which a fit resumes from; one that fails
// before a step was trained, or without the option, leaves none.
TEST(ModelCheckpoint, SaveOnExceptionSavesWhereTheFitFailed) {
  const auto dir = fresh_folder("on_exception");
  struct FailsAt : TinyModule {
    explicit FailsAt(int64_t at) : at(at) {}
    torch::Tensor training_step(Batch& batch, int64_t index) override {
      if (global_step() == at) throw Error("step failed");
      return TinyModule::training_step(batch, index);
    }
    int64_t at;
  };
  const auto options = ModelCheckpointOptions().dirpath(dir).filename("{step}").save_last(true);
  const auto fail = [&](int64_t at, ModelCheckpointOptions chosen) {
    FailsAt module(at);
    auto checkpoint = std::make_shared<ModelCheckpoint>(chosen);
    Trainer trainer(quiet().max_epochs(3).enable_checkpointing(true).num_sanity_val_steps(0), {checkpoint});
    EXPECT_NE(error_of([&] { trainer.fit(module, tiny_data(4, 2)); }).find("step failed"), std::string::npos);
    return checkpoint;
  };
  const auto saved = fail(3, ModelCheckpointOptions(options).save_on_exception(true));
  EXPECT_EQ(saved->exception_checkpoint(), dir + "/step=3.ckpt");
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.insert(entry.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"step=2.ckpt", "step=3.ckpt", "last.ckpt"}));
  EXPECT_EQ(CheckpointReader::read_meta(dir + "/last.ckpt").at("global_step"), 3);
  TinyModule resumed;
  Trainer again(quiet().max_epochs(3));
  again.fit(resumed, tiny_data(4, 2), {}, dir + "/step=3.ckpt");
  EXPECT_EQ(resumed.counts["training_step"], 3) << "the batches after step 3";
  fs::remove_all(dir);
  // The callback's own saves in the background: the exception's are written at once all the same.
  fail(3, ModelCheckpointOptions(options).save_on_exception(true).async_checkpointing(true));
  EXPECT_EQ(CheckpointReader::read_meta(dir + "/last.ckpt").at("global_step"), 3);
  fs::remove_all(dir);
  EXPECT_EQ(fail(3, options)->exception_checkpoint(), "");
  EXPECT_EQ(fail(0, ModelCheckpointOptions(options).save_on_exception(true))->exception_checkpoint(), "")
      << "a fit that failed at its first step has nothing trained to keep";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace arc
