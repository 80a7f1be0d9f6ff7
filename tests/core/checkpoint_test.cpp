// Checkpoints: exact resume from any step, every bad-file case, saves killed or failed mid-write.
#include "support/stateful_module.h"
#include "support/tiny_module.h"

#include "support/command.h"
#include "support/errors.h"
#include "support/row_stream.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

extern char** environ;

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

TEST(Checkpoint, ResumingAfterAnyStepEndsBitIdentical) {
  Stateful reference;
  Trainer uninterrupted(resume_options());
  uninterrupted.fit(reference, shuffled(), tiny_data(4, 2));
  const auto expected = weights_of(reference);
  const auto reference_metrics = uninterrupted.callback_metrics();
  const auto dir = fresh_folder("resume");
  for (int64_t k = 1; k <= 21; ++k) {
    const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
    Stateful interrupted;
    Trainer(resume_options(), {std::make_shared<StopAfter>(k, path)}).fit(interrupted, shuffled(), tiny_data(4, 2));
    Stateful resumed;
    Trainer trainer(resume_options());
    trainer.fit(resumed, shuffled(), tiny_data(4, 2), path);
    EXPECT_TRUE(torch::equal(weights_of(resumed), expected)) << "resumed after batch " << k;
    EXPECT_EQ(resumed.counts["training_step"], 21 - k) << "the resumed run must not redo batches";
    EXPECT_EQ(trainer.current_epoch(), 3);
    EXPECT_EQ(trainer.callback_metrics().at("epoch_loss"), reference_metrics.at("epoch_loss")) << "after batch " << k;
    EXPECT_EQ(trainer.callback_metrics().at("worst_loss_epoch"), reference_metrics.at("worst_loss_epoch"));
  }
  fs::remove_all(dir);
}

// Stateful's steps on both parts of a CombinedLoader's batches.
class StatefulTwoSources : public Stateful {
 public:
  torch::Tensor training_step(Batch& batch, int64_t index) override {
    auto loss = Stateful::training_step(batch.part("a"), index);
    if (batch.has_part("b")) loss = loss + torch::mse_loss(linear(batch.part("b")[0]), batch.part("b")[1]);
    return loss;
  }
};

// A CombinedLoader resumes at the batch after the last one trained, each source at its own batch
// (under max_size_cycle the shorter one in its right round): after any step the run ends
// bit-identical and trains only the batches left.
TEST(Checkpoint, ACombinedLoaderResumesBitIdenticalAfterAnyStep) {
  const auto dir = fresh_folder("combined");
  for (const std::string mode : {"max_size_cycle", "max_size"}) {
    SCOPED_TRACE(mode);
    // "a": 7 batches, "b" 3, each shuffled (the order of b's rounds in an epoch stays the epoch's).
    const auto sources = [&] {
      auto other = tiny_data(6, 2);
      other.options.shuffle(true);
      return CombinedLoader({{"a", shuffled()}, {"b", other}}, mode);
    };
    StatefulTwoSources reference;
    Trainer(resume_options()).fit(reference, sources(), tiny_data(4, 2));
    const auto expected = weights_of(reference);
    for (int64_t k = 1; k <= 21; ++k) {
      const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
      StatefulTwoSources interrupted;
      Trainer(resume_options(), {std::make_shared<StopAfter>(k, path)}).fit(interrupted, sources(), tiny_data(4, 2));
      StatefulTwoSources resumed;
      Trainer(resume_options()).fit(resumed, sources(), tiny_data(4, 2), path);
      EXPECT_TRUE(torch::equal(weights_of(resumed), expected)) << "resumed after batch " << k;
      EXPECT_EQ(resumed.counts["training_step"], 21 - k) << "the resumed run must not redo batches";
    }
  }
  fs::remove_all(dir);
}

// A stream resumes at the sample after the last batch trained, from its own state (a seek) or by
// reading it again: after any step (mid-epoch, mid-accumulation, at an epoch's end, in epochs whose
// order differs) the run ends bit-identical, and the resumed run trains the batches left only.
TEST(Checkpoint, AStreamResumesBitIdenticalAfterAnyStep) {
  const auto options = [] {
    return quiet().max_epochs(3).accumulate_grad_batches(2).seed(3).val_check_interval(BatchAmount::count(3));
  };
  const auto dir = fresh_folder("stream");
  for (const bool reports : {true, false}) {
    SCOPED_TRACE(reports ? "stream state" : "re-read");
    const auto stream = [reports] {
      return testing::tiny_stream(14, 2, {.reports_state = reports, .seeks = false, .rotate_by_epoch = true});
    };
    Stateful reference;
    Trainer(options()).fit(reference, stream(), tiny_data(4, 2));
    const auto expected = weights_of(reference);
    for (int64_t k = 1; k <= 21; ++k) {
      const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
      Stateful interrupted;
      Trainer(options(), {std::make_shared<StopAfter>(k, path)}).fit(interrupted, stream(), tiny_data(4, 2));
      Stateful resumed;
      Trainer trainer(options());
      const auto data = stream();
      trainer.fit(resumed, data, tiny_data(4, 2), path);
      EXPECT_TRUE(torch::equal(weights_of(resumed), expected)) << "resumed after batch " << k;
      EXPECT_EQ(resumed.counts["training_step"], 21 - k) << "the resumed run must not redo batches";
      EXPECT_EQ(trainer.current_epoch(), 3);
      // Resuming by state reads the rows after the position only (the rows of the epochs left).
      const auto& rows = dynamic_cast<const testing::RowStreamDataset&>(*data.stream);
      const int64_t left_in_epoch = (7 - k % 7) * 2, later_epochs = (2 - k / 7) * 14;
      if (reports && k % 7 != 0) {
        EXPECT_EQ(rows.rows_read, left_in_epoch + later_epochs) << "after batch " << k;
      }
    }
    // Saved once a one-epoch fit returned: the next epoch opens its stream afresh.
    Stateful one_epoch;
    Trainer first(options().max_epochs(1));
    first.fit(one_epoch, stream(), tiny_data(4, 2));
    first.save_checkpoint(dir + "/one_epoch.ckpt");
    Stateful continued;
    Trainer(options()).fit(continued, stream(), tiny_data(4, 2), dir + "/one_epoch.ckpt");
    EXPECT_EQ(continued.counts["training_step"], 14);
    EXPECT_TRUE(torch::equal(weights_of(continued), expected));
    // SIGTERM at the first epoch's end is settled after it, where the checkpoint holds no stream
    // position: the resumed run opens the second epoch's stream afresh.
    const auto hpc_dir = dir + (reports ? "/hpc_state" : "/hpc_reread");
    auto signal = std::make_shared<LambdaCallback>();
    signal->train_epoch_end = [](Trainer& trainer, TrainModule&) {
      if (trainer.current_epoch() == 0) std::raise(SIGTERM);
    };
    Stateful stopped;
    Trainer signalled(options().default_root_dir(hpc_dir), {signal});
    EXPECT_NE(testing::error_of([&] { signalled.fit(stopped, stream(), tiny_data(4, 2)); }).find("SIGTERM"),
              std::string::npos);
    Stateful requeued;
    Trainer(options().default_root_dir(hpc_dir)).fit(requeued, stream(), tiny_data(4, 2));
    EXPECT_EQ(stopped.counts["training_step"] + requeued.counts["training_step"], 21);
    EXPECT_TRUE(torch::equal(weights_of(requeued), expected));
  }
  fs::remove_all(dir);
}

// An exponential moving average of the weights (issue 18, row 4): fit ends with the averaged weights,
// every checkpoint holds them as the module's, and resuming (the averages and the current weights
// both restored, mid-epoch, mid-accumulation, after a validation that ran on the averages) ends
// bit-identical.
TEST(Checkpoint, WeightAveragingSavesTheAverageAndResumesBitIdentical) {
  Stateful reference;
  auto reference_ema = std::make_shared<EMAWeightAveraging>(0.7);
  Trainer(resume_options(), {reference_ema}).fit(reference, shuffled(), tiny_data(4, 2));
  const auto expected = weights_of(reference);
  EXPECT_EQ(reference_ema->updates(), 12);  // 3 epochs of 4 steps
  const auto dir = fresh_folder("averaging");
  for (const int64_t k : {3, 8, 14}) {
    const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
    Stateful interrupted;
    auto ema = std::make_shared<EMAWeightAveraging>(0.7);
    // The stopping callback first: the Trainer still runs checkpointing callbacks last, but this
    // one saves by hand, so its place decides whether the step's average is in the file.
    Trainer(resume_options(), {ema, std::make_shared<StopAfter>(k, path)})
        .fit(interrupted, shuffled(), tiny_data(4, 2));
    // The file's module weights are the average at the save, which fit ended with.
    Stateful loaded;
    load_checkpoint_weights(loaded, path);
    EXPECT_TRUE(torch::equal(weights_of(loaded), weights_of(interrupted))) << "saved after batch " << k;
    Stateful resumed;
    auto resumed_ema = std::make_shared<EMAWeightAveraging>(0.7);
    Trainer(resume_options(), {resumed_ema}).fit(resumed, shuffled(), tiny_data(4, 2), path);
    EXPECT_TRUE(torch::equal(weights_of(resumed), expected)) << "resumed after batch " << k;
    EXPECT_EQ(resumed_ema->updates(), 12);
  }
  // The average differs from the weights training reached: the test can tell them apart.
  Stateful plain;
  Trainer(resume_options()).fit(plain, shuffled(), tiny_data(4, 2));
  EXPECT_FALSE(torch::allclose(weights_of(plain), expected));
  fs::remove_all(dir);
}

// StochasticWeightAveraging: resumed before averaging starts, inside its first (annealing) epoch, and
// after an average, the run ends bit-identical, at the same rate.
TEST(Checkpoint, StochasticWeightAveragingResumesBitIdentical) {
  const auto swa = [] { return std::make_shared<StochasticWeightAveraging>(std::vector<double>{0.03}, 2, 2); };
  Stateful reference;
  Trainer(resume_options(), {swa()}).fit(reference, shuffled(), tiny_data(4, 2));
  const auto expected = weights_of(reference);
  const auto dir = fresh_folder("swa");
  for (const int64_t k : {3, 9, 16}) {
    const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
    Stateful interrupted;
    Trainer(resume_options(), {swa(), std::make_shared<StopAfter>(k, path)})
        .fit(interrupted, shuffled(), tiny_data(4, 2));
    Stateful resumed;
    auto resumed_swa = swa();
    Trainer(resume_options(), {resumed_swa}).fit(resumed, shuffled(), tiny_data(4, 2), path);
    EXPECT_TRUE(torch::equal(weights_of(resumed), expected)) << "resumed after batch " << k;
    EXPECT_EQ(resumed_swa->updates(), 2);
  }
  fs::remove_all(dir);
}

// LibTorch's own StepLR plugged in as is (it multiplies the current rate, so its rates differ from
// Arclight's closed form in the last bits): the resumed run must still end bit-identical.
class StatefulWithLibTorchScheduler : public Stateful {
 public:
  std::vector<OptimizerConfig> configure_optimizers() override {
    sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
    auto scheduler = std::make_shared<TorchLRScheduler>(*sgd, std::make_shared<torch::optim::StepLR>(*sgd, 3, 0.7));
    return {OptimizerConfig(sgd, SchedulerConfig{scheduler, Interval::step, 1, ""})};
  }
  double lr() const { return sgd->param_groups()[0].options().get_lr(); }
  std::shared_ptr<torch::optim::SGD> sgd;
};

TEST(Checkpoint, ALibTorchSchedulerResumesBitIdentical) {
  StatefulWithLibTorchScheduler reference;
  Trainer(resume_options()).fit(reference, shuffled(), tiny_data(4, 2));
  const auto dir = fresh_folder("resume_libtorch_scheduler");
  for (int64_t k : {1, 6, 13, 20}) {
    const std::string path = dir + "/k" + std::to_string(k) + ".ckpt";
    StatefulWithLibTorchScheduler interrupted;
    Trainer(resume_options(), {std::make_shared<StopAfter>(k, path)}).fit(interrupted, shuffled(), tiny_data(4, 2));
    StatefulWithLibTorchScheduler resumed;
    Trainer(resume_options()).fit(resumed, shuffled(), tiny_data(4, 2), path);
    EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(reference))) << "resumed after batch " << k;
    EXPECT_EQ(resumed.lr(), reference.lr()) << "resumed after batch " << k;
  }
  fs::remove_all(dir);
}

// Sends this process `signal` after global batch `at`, as a scheduler would; records whether a
// handler for `signal` was installed while fit trained.
class SignalAfter : public Callback {
 public:
  SignalAfter(int64_t at, int signal) : at_(at), signal_(signal) {}
  std::string state_key() const override { return "SignalAfter"; }
  void on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) override {
    struct sigaction current {};
    sigaction(signal_, nullptr, &current);
    handled = current.sa_handler != SIG_DFL;
    if (trainer.progress().total_batches == at_) std::raise(signal_);
  }
  bool handled = false;

 private:
  int64_t at_;
  int signal_;
};

// Sets an environment variable for a test's duration.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Checkpoint, SigtermSavesHpcCheckpointsThatTheNextFitsResumeFromExactly) {
  Stateful reference;
  Trainer(resume_options()).fit(reference, shuffled(), tiny_data(4, 2));
  const auto dir = fresh_folder("sigterm");
  const auto options = resume_options().default_root_dir(dir);
  int64_t batches_run = 0;
  for (const int64_t at : {5, 12}) {
    Stateful interrupted;
    Trainer trainer(options, {std::make_shared<SignalAfter>(at, SIGTERM)});
    const auto error = testing::error_of([&] { trainer.fit(interrupted, shuffled(), tiny_data(4, 2)); });
    const auto expected = dir + "/hpc_ckpt_" + std::to_string(at == 5 ? 1 : 2) + ".ckpt";
    EXPECT_NE(error.find("fit stopped by SIGTERM at global step"), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    EXPECT_TRUE(fs::exists(expected));
    batches_run += interrupted.counts["training_step"];
  }
  // A newer file that is not a complete checkpoint is passed over.
  std::ofstream(dir + "/hpc_ckpt_3.ckpt") << std::string(4096, 'x');
  Stateful resumed;
  Trainer(options).fit(resumed, shuffled(), tiny_data(4, 2));
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(reference)));
  EXPECT_EQ(batches_run + resumed.counts["training_step"], 21) << "no batch is lost or run twice";
  // The handler is gone after fit: SIGTERM's default action is back.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
  fs::remove_all(dir);
}

// A checkpoint written by save_checkpoint once fit returned (to train on later with more epochs, as
// Lightning users do) resumes at the next epoch's first batch (it skipped that epoch), and the run
// ends as an uninterrupted one; so does one written for a signal caught at an epoch's last batch.
TEST(Checkpoint, SavedBetweenEpochsResumesAtTheNextEpochsFirstBatch) {
  Stateful reference;
  Trainer(resume_options()).fit(reference, shuffled(), tiny_data(4, 2));
  const auto dir = fresh_folder("between");
  Stateful first;
  Trainer one_epoch(resume_options().max_epochs(1));
  one_epoch.fit(first, shuffled(), tiny_data(4, 2));
  one_epoch.save_checkpoint(dir + "/one_epoch.ckpt");
  Stateful continued;
  Trainer more_epochs(resume_options());
  more_epochs.fit(continued, shuffled(), tiny_data(4, 2), dir + "/one_epoch.ckpt");
  EXPECT_EQ(continued.counts["training_step"], 14);
  EXPECT_EQ(more_epochs.current_epoch(), 3);
  EXPECT_TRUE(torch::equal(weights_of(continued), weights_of(reference)));

  Stateful interrupted;
  Trainer signalled(resume_options().default_root_dir(dir), {std::make_shared<SignalAfter>(7, SIGTERM)});
  const auto error = testing::error_of([&] { signalled.fit(interrupted, shuffled(), tiny_data(4, 2)); });
  EXPECT_NE(error.find("fit stopped by SIGTERM at global step"), std::string::npos) << error;
  Stateful resumed;
  Trainer(resume_options().default_root_dir(dir)).fit(resumed, shuffled(), tiny_data(4, 2));
  EXPECT_EQ(interrupted.counts["training_step"] + resumed.counts["training_step"], 21) << "no batch lost or run twice";
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(reference)));
  fs::remove_all(dir);
}

// A data module whose state is a curriculum's level; it notes the level whenever its loaders are asked for.
struct Curriculum : DataModule {
  explicit Curriculum(int64_t start, bool stateful = true) : level(start), stateful(stateful) {}
  nlohmann::json state_dict() const override { return stateful ? nlohmann::json{{"level", level}} : nullptr; }
  void load_state_dict(const nlohmann::json& state) override { level = state.at("level").get<int64_t>(); }
  DataSource train_dataloader() override { return noted(); }
  DataSource val_dataloader() override { return noted(); }
  DataSource predict_dataloader() override { return noted(); }
  DataSource noted() {
    levels_seen.push_back(level);
    return tiny_data(4, 2);
  }
  int64_t level;
  bool stateful;
  std::vector<int64_t> levels_seen;
};

TEST(Checkpoint, ADataModulesStateIsSavedAndGivenBackBeforeItsLoadersAreAskedFor) {
  const auto dir = fresh_folder("data_state");
  TinyModule first;
  Curriculum data(3);
  Trainer(quiet().max_epochs(2), {std::make_shared<StopAfter>(3, dir + "/mid.ckpt")}).fit(first, data);
  ASSERT_EQ(CheckpointReader::read_meta(dir + "/mid.ckpt").at("data_module"), (nlohmann::json{{"level", 3}}));
  // A resumed fit, a validation and a prediction from the checkpoint each see the saved level.
  TinyModule resumed;
  Curriculum again(0);
  Trainer(quiet().max_epochs(2)).fit(resumed, again, dir + "/mid.ckpt");
  EXPECT_EQ(again.levels_seen, (std::vector<int64_t>{3, 3}));
  Curriculum evaluated(0);
  Trainer(quiet()).validate(resumed, evaluated, dir + "/mid.ckpt", false);
  Trainer(quiet()).predict(resumed, evaluated, dir + "/mid.ckpt");
  EXPECT_EQ(evaluated.levels_seen, (std::vector<int64_t>{3, 3}));
  // Without a checkpoint nothing is given back, and a null state is not saved.
  Curriculum fresh(5, /*stateful=*/false);
  Trainer(quiet().max_epochs(1), {std::make_shared<StopAfter>(1, dir + "/none.ckpt")}).fit(resumed, fresh);
  EXPECT_EQ(fresh.levels_seen, (std::vector<int64_t>{5, 5}));
  EXPECT_FALSE(CheckpointReader::read_meta(dir + "/none.ckpt").contains("data_module"));
  fs::remove_all(dir);
}

// Inside a SLURM job the requeue signal is caught; when scontrol cannot requeue (here it is not
// on PATH), the checkpoint is still saved and the error says how to resume.
TEST(Checkpoint, RequeueSignalInASlurmJobSavesAndSaysWhatToDoWhenRequeueFails) {
  const auto dir = fresh_folder("requeue");
  ScopedEnv job("SLURM_JOB_ID", "4242");
  ScopedEnv tasks("SLURM_NTASKS", "1");
  ScopedEnv task("SLURM_PROCID", "0");
  ScopedEnv path("PATH", dir);
  Stateful module;
  auto signal = std::make_shared<SignalAfter>(5, SIGUSR2);
  Trainer trainer(
      resume_options().default_root_dir(dir).slurm(cluster::SlurmEnvironmentOptions().requeue_signal("SIGUSR2")),
      {signal});
  const auto error = testing::error_of([&] { trainer.fit(module, shuffled(), tiny_data(4, 2)); });
  EXPECT_NE(error.find("fit stopped by SIGUSR2 at global step 2 and saved '" + dir + "/hpc_ckpt_1.ckpt'"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("'scontrol requeue 4242' failed (cannot start 'scontrol'"), std::string::npos) << error;
  EXPECT_NE(error.find("submit the job again to resume from it"), std::string::npos) << error;
  EXPECT_TRUE(fs::exists(dir + "/hpc_ckpt_1.ckpt"));
  // auto_requeue off: the signal keeps its default action (checked without raising it).
  auto probe = std::make_shared<SignalAfter>(-1, SIGUSR2);
  Stateful other;
  Trainer(resume_options()
              .default_root_dir(dir + "/off")
              .slurm(cluster::SlurmEnvironmentOptions().auto_requeue(false))
              .max_epochs(1),
          {probe})
      .fit(other, shuffled(), tiny_data(4, 2));
  EXPECT_FALSE(probe->handled);
  EXPECT_TRUE(signal->handled);
  fs::remove_all(dir);
}

TEST(Checkpoint, SavedRightAfterValidationResumesExactly) {
  struct SaveAfterValidation : Callback {
    std::string path;
    bool done = false;
    std::string state_key() const override { return "SaveAfterValidation"; }
    void on_validation_end(Trainer& trainer, TrainModule&) override {
      if (done || trainer.sanity_checking()) return;
      trainer.save_checkpoint(path);
      trainer.request_stop("interrupted");
      done = true;
    }
  };
  Stateful reference;
  Trainer(resume_options()).fit(reference, shuffled(), tiny_data(4, 2));
  const auto dir = fresh_folder("after_val");
  auto saver = std::make_shared<SaveAfterValidation>();
  saver->path = dir + "/val.ckpt";
  Stateful interrupted;
  Trainer(resume_options(), {saver}).fit(interrupted, shuffled(), tiny_data(4, 2));
  Stateful resumed;
  Trainer(resume_options()).fit(resumed, shuffled(), tiny_data(4, 2), saver->path);
  EXPECT_TRUE(torch::equal(weights_of(resumed), weights_of(reference)));
  // Validation first runs after batch 3 of 7 (val_check_interval 0.5), so 18 of 21 batches remain.
  EXPECT_EQ(resumed.counts["training_step"], 18);
  fs::remove_all(dir);
}

using testing::error_of;

class BadCheckpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_folder("bad");
    good_ = dir_ + "/good.ckpt";
    Stateful module;
    Trainer trainer(quiet().max_steps(2));
    trainer.fit(module, tiny_data(4, 2));
    trainer.save_checkpoint(good_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string resume_error(const std::string& path) {
    return error_of([&] {
      Stateful module;
      Trainer(quiet().max_steps(4)).fit(module, tiny_data(4, 2), {}, path);
    });
  }

  std::string dir_, good_;
};

TEST_F(BadCheckpoints, MissingFile) {
  EXPECT_NE(resume_error(dir_ + "/nope.ckpt").find("does not exist"), std::string::npos);
}

TEST_F(BadCheckpoints, TruncatedFiles) {
  const auto size = fs::file_size(good_);
  for (const auto cut : {size / 2, size - 10, static_cast<uintmax_t>(0)}) {
    const std::string path = dir_ + "/cut" + std::to_string(cut) + ".ckpt";
    fs::copy_file(good_, path);
    fs::resize_file(path, cut);
    const auto message = resume_error(path);
    EXPECT_TRUE(message.find("truncated") != std::string::npos) << message;
  }
}

TEST_F(BadCheckpoints, CorruptFile) {
  const std::string path = dir_ + "/corrupt.ckpt";
  std::ofstream(path) << std::string(4096, 'x');
  EXPECT_NE(resume_error(path).find("truncated or corrupt"), std::string::npos);
}

TEST_F(BadCheckpoints, AnotherModel) {
  struct Wider : TrainModule {
    Wider() { linear = register_module("linear", torch::nn::Linear(5, 1)); }
    torch::Tensor training_step(Batch&, int64_t) override { return {}; }
    std::vector<OptimizerConfig> configure_optimizers() override { return {}; }
    torch::nn::Linear linear{nullptr};
  } wider;
  const auto message = error_of([&] { Trainer(quiet()).validate(wider, tiny_data(4, 2), good_); });
  EXPECT_NE(message.find("'linear.weight' has shape [1,4], the module has [1,5]"), std::string::npos) << message;
}

TEST_F(BadCheckpoints, UnknownFormatVersion) {
  const std::string path = dir_ + "/future.ckpt";
  fs::copy_file(good_, path);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(8);
  const uint64_t version = 99;
  file.write(reinterpret_cast<const char*>(&version), 8);
  file.close();
  EXPECT_NE(resume_error(path).find("format version 99"), std::string::npos);
}

// A flipped byte anywhere in the stored data is caught before the module is touched.
TEST_F(BadCheckpoints, CorruptDataChangesNothing) {
  const auto size = fs::file_size(good_);
  for (const auto at : {size_t{70}, static_cast<size_t>(size / 2), static_cast<size_t>(size - 40)}) {
    const std::string path = dir_ + "/flip" + std::to_string(at) + ".ckpt";
    fs::copy_file(good_, path);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(at));
    const char byte = static_cast<char>(file.get() ^ 0x10);
    file.seekp(static_cast<std::streamoff>(at));
    file.put(byte);
    file.close();
    Stateful module;
    const auto before = weights_of(module).clone();
    const auto message = error_of([&] { Trainer(quiet()).validate(module, tiny_data(4, 2), path); });
    EXPECT_NE(message.find("corrupt"), std::string::npos) << at << ": " << message;
    EXPECT_TRUE(torch::equal(weights_of(module), before));
  }
}

// A tensor large enough to be checksummed on a second thread while it is written: the file is the
// same byte for byte as one thread's, loads, and a flipped byte in it is caught.
TEST(Checkpoint, LargeTensorsWriteTheSameFileOnOneThreadOrTwo) {
  const auto dir = fresh_folder("threads");
  const auto large = torch::randn({3 << 20});  // 12 MB
  CheckpointWriter writer(nlohmann::json{{"n", 1}});
  writer.add("large", large);
  writer.add("small", torch::arange(10));
  writer.write(dir + "/one.ckpt", CheckpointWriter::Threads::kOne);
  writer.write(dir + "/two.ckpt", CheckpointWriter::Threads::kTwo);
  const auto bytes = arc::testing::read_file(dir + "/two.ckpt");
  EXPECT_TRUE(bytes == arc::testing::read_file(dir + "/one.ckpt"));  // (not EXPECT_EQ: 12 MB to print)
  EXPECT_TRUE(torch::equal(CheckpointReader(dir + "/two.ckpt").tensor("large"), large));
  std::fstream file(dir + "/two.ckpt", std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(bytes.size() / 2));
  file.put(static_cast<char>(bytes[bytes.size() / 2] ^ 0x10));
  file.close();
  const auto message = error_of([&] { CheckpointReader{dir + "/two.ckpt"}; });
  EXPECT_NE(message.find("'large'"), std::string::npos) << message;
  EXPECT_NE(message.find("corrupt"), std::string::npos) << message;
  fs::remove_all(dir);
}

// Checkpoints of 8 MB or more are checked and read on as many threads as LibTorch's intra-op
// thread count: what they load is the same as on one thread, into any destination, and a damaged
// blob, or a file cut short after it was opened, is the same clear error from whichever thread met it.
TEST(Checkpoint, LargeCheckpointsLoadTheSameOnSeveralThreads) {
  const auto dir = fresh_folder("read_threads");
  const int threads_before = torch::get_num_threads();
  std::vector<std::pair<std::string, torch::Tensor>> saved;
  CheckpointWriter writer(nlohmann::json{{"n", 1}});
  for (int i = 0; i < 6; ++i) saved.emplace_back("blob" + std::to_string(i), torch::randn({1 << 19}));  // 2 MB each
  saved.emplace_back("large", torch::randn({3 << 20}));  // 12 MB: three pieces
  saved.emplace_back("matrix", torch::randn({64, 32}));
  for (const auto& [name, tensor] : saved) writer.add(name, tensor);
  const std::string path = dir + "/large.ckpt";
  writer.write(path);
  for (const int threads : {1, 2}) {
    torch::set_num_threads(threads);
    const CheckpointReader reader(path);
    std::vector<std::pair<std::string, torch::Tensor>> loaded;
    for (const auto& [name, tensor] : saved) loaded.emplace_back(name, torch::zeros_like(tensor));
    loaded.back().second = torch::zeros({32, 64}).t();                      // not contiguous
    loaded.emplace_back("blob0", torch::zeros({1 << 19}, torch::kDouble));  // another type
    reader.read_all_into(loaded);
    for (size_t i = 0; i < saved.size(); ++i)
      EXPECT_TRUE(torch::equal(loaded[i].second, saved[i].second)) << threads << " threads: " << saved[i].first;
    EXPECT_TRUE(torch::equal(loaded.back().second, saved[0].second.to(torch::kDouble))) << threads << " threads";
  }
  const auto bytes = arc::testing::read_file(path);
  // A flipped byte in blob4 (blob i from 64 + i x 2 MB), and one in the second of large's pieces
  // (from 64 + 12 MB), whose checksums are summed on either thread and joined.
  for (const auto& [at, name] : {std::pair<size_t, std::string>{64 + (9 << 20), "blob4"}, {64 + (17 << 20), "large"}}) {
    const std::string damaged = dir + "/damaged_" + name + ".ckpt";
    fs::copy_file(path, damaged);
    std::fstream file(damaged, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(at));
    file.put(static_cast<char>(bytes[at] ^ 0x10));
    file.close();
    const auto corrupt = error_of([&] { CheckpointReader{damaged}; });
    EXPECT_NE(corrupt.find("'" + name + "' fails its checksum"), std::string::npos) << corrupt;
  }
  // The file cut in the last of large's three pieces, which either thread may take (so, ten times).
  const CheckpointReader opened(path);
  fs::resize_file(path, 64 + (22 << 20));
  auto large = torch::zeros({3 << 20});
  for (int i = 0; i < 10; ++i) {
    const auto cut = error_of([&] { opened.read_into("large", large); });
    EXPECT_NE(cut.find("it is shorter than when it was opened"), std::string::npos) << i << ": " << cut;
  }
  torch::set_num_threads(threads_before);
  fs::remove_all(dir);
}

TEST_F(BadCheckpoints, WeightsOnlyCannotResumeButCanEvaluate) {
  Stateful module;
  Trainer trainer(quiet().max_steps(1));
  trainer.fit(module, tiny_data(4, 2));
  const std::string path = dir_ + "/weights.ckpt";
  trainer.save_checkpoint(path, true);
  EXPECT_NE(resume_error(path).find("holds weights only"), std::string::npos);
  Stateful fresh;
  Trainer(quiet()).validate(fresh, tiny_data(4, 2), path);
  EXPECT_TRUE(torch::equal(weights_of(fresh), weights_of(module)));
}

// JSON has no NaN: a checkpoint written after a loss went NaN still loads, with the NaN.
TEST(Checkpoint, NonFiniteMetricsSurviveTheCheckpoint) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  MetricStore store;
  store.log("loss", torch::tensor(nan), LogOptions().on_step(false).on_epoch(true), true, 2);
  store.log("worst", torch::tensor(-inf), LogOptions().on_step(false).on_epoch(true).reduce(Reduce::max), true, 2);
  MetricStore loaded;
  loaded.load_state_dict(nlohmann::json::parse(store.state_dict().dump()));
  const auto metrics = loaded.end_epoch();
  EXPECT_TRUE(std::isnan(metrics.at("loss")));
  EXPECT_EQ(metrics.at("worst"), -inf);
  const auto again = metrics_from_json(nlohmann::json::parse(metrics_to_json(metrics).dump()));
  EXPECT_TRUE(std::isnan(again.at("loss")));
  EXPECT_EQ(again.at("worst"), -inf);
}

}  // namespace
}  // namespace arc

namespace arc {
namespace {

// SIGKILL a process while it writes checkpoints, many times: the file at the path is always a
// complete, loadable checkpoint.
TEST(Checkpoint, KilledWhileSavingAlwaysLeavesTheLastGoodCheckpoint) {
  const auto dir = fresh_folder("kill");
  const std::string path = dir + "/last.ckpt";
  std::mt19937 random(std::random_device{}());
  int64_t last_generation = -1;
  for (int round = 0; round < 8; ++round) {
    pid_t pid = 0;
    std::vector<char*> argv = {const_cast<char*>(ARC_CHECKPOINT_WRITER), const_cast<char*>(path.c_str()), nullptr};
    ASSERT_EQ(posix_spawn(&pid, ARC_CHECKPOINT_WRITER, nullptr, nullptr, argv.data(), environ), 0);
    const auto started = std::chrono::steady_clock::now();
    const auto deadline = started + std::chrono::seconds(20);
    while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(400, 900)(random)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    const CheckpointReader checkpoint(path);
    torch::nn::Linear model(2048, 4096);
    checkpoint.load_module(*model);
    const auto generation = checkpoint.meta().at("generation").get<int64_t>();
    EXPECT_EQ(model->weight[7][9].item<float>(), static_cast<float>(generation));
    last_generation = generation;
  }
  EXPECT_GE(last_generation, 0);
  fs::remove_all(dir);
}

std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) found.push_back(entry.path().string());
  return found;
}

// A write that fails midway (here: past the file size limit, as a full disk would) is an arc::Error
// naming the file, the cause and the fix; no temporary file stays, the previous checkpoint is intact.
TEST(Checkpoint, FailedWriteIsAClearErrorAndLosesNothing) {
  const auto dir = fresh_folder("fsize");
  const std::string path = dir + "/last.ckpt";
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).default_root_dir(dir));
  trainer.fit(module, tiny_data(16, 4));
  trainer.save_checkpoint(path);
  const auto before = arc::testing::read_file(path);
  ASSERT_GT(before.size(), 1024u);
  rlimit saved_limit{};
  getrlimit(RLIMIT_FSIZE, &saved_limit);
  const auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved_limit;
  small.rlim_cur = 1024;
  setrlimit(RLIMIT_FSIZE, &small);
  const auto message = testing::error_of([&] { trainer.save_checkpoint(path); });
  setrlimit(RLIMIT_FSIZE, &saved_limit);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_NE(message.find("cannot write checkpoint '" + path + "' (File too large"), std::string::npos) << message;
  EXPECT_NE(message.find("ulimit -f"), std::string::npos) << message;
  EXPECT_NE(message.find("previous '" + path + "', if any, is intact"), std::string::npos) << message;
  EXPECT_TRUE(temporaries_in(dir).empty());
  EXPECT_EQ(arc::testing::read_file(path), before);
  EXPECT_NO_THROW(CheckpointReader{path});
  fs::remove_all(dir);
}

// A checkpoint folder that cannot be made fails fit with an arc::Error, not an abort.
TEST(Checkpoint, UnwritableFolderFailsFitWithTheFix) {
  const auto dir = fresh_folder("unwritable");
  std::ofstream(dir + "/file") << "not a folder";
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).default_root_dir(dir),
                  {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir + "/file/checkpoints"))});
  const auto message = testing::error_of([&] { trainer.fit(module, tiny_data(16, 4)); });
  EXPECT_NE(message.find("cannot create the folder of checkpoint '" + dir + "/file/checkpoints/"), std::string::npos)
      << message;
  EXPECT_NE(message.find("save elsewhere"), std::string::npos) << message;
  fs::remove_all(dir);
}

// Saves that a crash or SIGKILL interrupted leave <name>.tmp-<pid>: the next fit in that folder
// removes those of dead processes, and keeps those of live ones.
TEST(Checkpoint, NextFitRemovesTemporariesOfDeadWriters) {
  const auto dir = fresh_folder("stale");
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  fs::create_directories(dir + "/checkpoints");
  const std::string stale = dir + "/checkpoints/last.ckpt.tmp-" + std::to_string(dead);
  const std::string stale_hpc = dir + "/hpc_ckpt_1.ckpt.tmp-" + std::to_string(dead);
  const std::string live = dir + "/checkpoints/other.ckpt.tmp-" + std::to_string(getpid());
  for (const auto& file : {stale, stale_hpc, live}) std::ofstream(file) << "partial";
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).default_root_dir(dir).enable_checkpointing(false));
  trainer.fit(module, tiny_data(16, 4));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale_hpc));
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace arc
