// What runs under each Trainer option: steps, optimizer steps, validation runs and batches.
#include "support/tiny_module.h"

#include "support/errors.h"
#include "support/scratch.h"

#include <arc/accelerators/accelerator_backend.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace arc {
namespace {

using testing::error_of;
using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

struct Run {
  TinyModule module;
  int64_t global_step = 0;
  int64_t epochs = 0;
  int64_t validations = 0;
};

// 10 samples in batches of 2: 5 training batches per epoch; 6 validation samples: 3 batches.
std::unique_ptr<Run> fit(TrainerOptions options, int64_t train_samples = 10) {
  auto run = std::make_unique<Run>();
  Trainer trainer(options);
  trainer.fit(run->module, tiny_data(train_samples, 2), tiny_data(6, 2));
  run->global_step = trainer.global_step();
  run->epochs = trainer.current_epoch();
  run->validations = trainer.progress().validation_runs;
  return run;
}

TEST(Trainer, DeterministicAndBenchmarkSetTheCudnnSwitches) {
  auto& context = at::globalContext();
  const auto run = [](TrainerOptions options) {
    TinyModule module;
    Trainer(options.max_steps(1)).fit(module, tiny_data(4, 2));
  };
  run(quiet().benchmark(true));
  EXPECT_TRUE(context.benchmarkCuDNN());
  EXPECT_FALSE(context.deterministicCuDNN());
  run(quiet());
  EXPECT_TRUE(context.benchmarkCuDNN()) << "unset leaves the setting as it is";
  run(quiet().deterministic(true));
  EXPECT_FALSE(context.benchmarkCuDNN()) << "deterministic turns an unset benchmark off";
  EXPECT_TRUE(context.deterministicCuDNN());
  EXPECT_TRUE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.deterministicAlgorithmsWarnOnly());
  // Lightning's "warn": deterministic algorithms, a warning where an operation has none.
  run(quiet().deterministic("warn"));
  EXPECT_TRUE(context.deterministicAlgorithms());
  EXPECT_TRUE(context.deterministicAlgorithmsWarnOnly());
  run(TrainerOptions::from_json({{"deterministic", "warn"},
                                 {"enable_progress_bar", false},
                                 {"logger", false},
                                 {"enable_checkpointing", false},
                                 {"enable_model_summary", false}}));
  EXPECT_TRUE(context.deterministicAlgorithmsWarnOnly());
  EXPECT_EQ(TrainerOptions().deterministic("warn").to_json()["deterministic"], "warn");
  EXPECT_THROW(TrainerOptions().deterministic("warm"), Error);
  run(quiet());
  EXPECT_FALSE(context.deterministicCuDNN());
  EXPECT_FALSE(context.deterministicAlgorithms());
}

TEST(Trainer, MaxEpochsRunsEveryBatchOfEachEpoch) {
  const auto run = fit(quiet().max_epochs(3).num_sanity_val_steps(0));
  EXPECT_EQ(run->module.counts["training_step"], 15);
  EXPECT_EQ(run->global_step, 15);
  EXPECT_EQ(run->epochs, 3);
  EXPECT_EQ(run->validations, 3);
  EXPECT_EQ(run->module.counts["validation_step"], 9);
}

TEST(Trainer, MaxStepsStopsBeforeMaxEpochs) {
  const auto run = fit(quiet().max_epochs(10).max_steps(7).num_sanity_val_steps(0));
  EXPECT_EQ(run->global_step, 7);
  EXPECT_EQ(run->module.counts["training_step"], 7);
}

TEST(Trainer, MaxStepsAloneRunsAcrossEpochs) {
  const auto run = fit(quiet().max_steps(12).limit_val_batches(BatchAmount::count(0)));
  EXPECT_EQ(run->global_step, 12);
  EXPECT_EQ(run->epochs, 3);  // the third epoch ran 2 of its 5 batches, then fit stopped
}

TEST(Trainer, LimitTrainBatchesByFractionAndCount) {
  EXPECT_EQ(fit(quiet().max_epochs(2).limit_train_batches(BatchAmount::fraction(0.4)))->global_step, 4);
  EXPECT_EQ(fit(quiet().max_epochs(2).limit_train_batches(BatchAmount::count(3)))->global_step, 6);
}

TEST(Trainer, LimitValBatchesCapsEveryValidationRun) {
  const auto run = fit(quiet().max_epochs(2).num_sanity_val_steps(0).limit_val_batches(BatchAmount::count(2)));
  EXPECT_EQ(run->module.counts["validation_step"], 4);
  const auto none = fit(quiet().max_epochs(2).limit_val_batches(BatchAmount::fraction(0.0)));
  EXPECT_EQ(none->module.counts["validation_step"], 0);
  EXPECT_EQ(none->validations, 0);
}

TEST(Trainer, ValCheckIntervalFractionValidatesTwicePerEpoch) {
  // 8 batches, interval 0.5 → after batches 4 and 8.
  const auto run =
      fit(quiet().max_epochs(2).num_sanity_val_steps(0).val_check_interval(BatchAmount::fraction(0.5)), 16);
  EXPECT_EQ(run->validations, 4);
}

TEST(Trainer, ValCheckIntervalCountValidatesEveryNBatches) {
  const auto run = fit(quiet().max_epochs(1).num_sanity_val_steps(0).val_check_interval(BatchAmount::count(2)), 12);
  EXPECT_EQ(run->validations, 3);
  EXPECT_THROW(fit(quiet().max_epochs(1).val_check_interval(BatchAmount::count(9))), Error);
}

TEST(Trainer, CheckValEveryNEpochSkipsEpochs) {
  const auto run = fit(quiet().max_epochs(4).num_sanity_val_steps(0).check_val_every_n_epoch(2));
  EXPECT_EQ(run->validations, 2);
}

TEST(Trainer, CheckValEveryNEpochNullCountsBatchesAcrossEpochs) {
  // 5 batches an epoch, 3 epochs: validation after batches 7 and 14 of the fit.
  const auto run = fit(quiet()
                           .max_epochs(3)
                           .num_sanity_val_steps(0)
                           .check_val_every_n_epoch(std::nullopt)
                           .val_check_interval(BatchAmount::count(7)));
  EXPECT_EQ(run->validations, 2);
  try {
    fit(quiet().max_epochs(1).check_val_every_n_epoch(std::nullopt));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("which must then be a count; got the fraction 1"), std::string::npos)
        << error.what();
  }
}

// Each training batch takes at least 50 ms; validation is due 0.2 s after the last one. At least one
// validation comes within 8 batches (the clock runs out by the 4th; the vote takes effect at the
// next batch), at most one every two batches (the clock restarts after each), and none comes at the
// epoch's end by itself.
class SlowSteps : public TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return TinyModule::training_step(batch, batch_idx);
  }
  void on_validation_start() override { at.push_back(global_step()); }
  std::vector<int64_t> at;
};

TEST(Trainer, ValCheckIntervalAsADurationValidatesByTheClock) {
  SlowSteps module;
  Trainer trainer(quiet().max_epochs(1).num_sanity_val_steps(0).val_check_interval(BatchAmount::duration(0.2)));
  trainer.fit(module, tiny_data(16, 2), tiny_data(4, 2));
  EXPECT_GE(module.at.size(), 1u);
  EXPECT_LE(module.at.size(), 4u);

  SlowSteps never;
  Trainer patient(quiet().max_epochs(1).num_sanity_val_steps(0).val_check_interval(BatchAmount::duration(3600)));
  patient.fit(never, tiny_data(4, 2), tiny_data(4, 2));
  EXPECT_TRUE(never.at.empty());
}

TEST(Trainer, SanityCheckRunsTheRequestedValidationSteps) {
  EXPECT_EQ(fit(quiet().max_epochs(1).limit_val_batches(BatchAmount::fraction(0.0)))->module.counts["validation_step"],
            0);
  EXPECT_EQ(fit(quiet().max_epochs(1))->module.counts["validation_step"], 2 + 3);
  EXPECT_EQ(fit(quiet().max_epochs(1).num_sanity_val_steps(-1))->module.counts["validation_step"], 3 + 3);
  EXPECT_EQ(fit(quiet().max_epochs(1).num_sanity_val_steps(0))->module.counts["validation_step"], 3);
}

TEST(Trainer, FastDevRunRunsOneBatchOfEachStage) {
  const auto run = fit(quiet().max_epochs(5).fast_dev_run(1));
  EXPECT_EQ(run->module.counts["training_step"], 1);
  EXPECT_EQ(run->module.counts["validation_step"], 1);
  EXPECT_EQ(run->epochs, 1);
  const auto three = fit(quiet().fast_dev_run(3));
  EXPECT_EQ(three->module.counts["training_step"], 3);
}

// As Lightning: fast_dev_run leaves no checkpoint behind and stops nothing early, even with the
// user's own ModelCheckpoint and EarlyStopping (here monitoring a metric that is never logged).
TEST(Trainer, FastDevRunDisablesCheckpointingAndEarlyStopping) {
  const auto dir = arc::testing::process_scratch() / "fast_dev_run";
  std::filesystem::remove_all(dir);
  TinyModule module;
  Trainer trainer(quiet().fast_dev_run(2),
                  {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir.string()).save_last(true)),
                   std::make_shared<EarlyStopping>(EarlyStoppingOptions("never_logged"))});
  trainer.fit(module, tiny_data(8, 2), tiny_data(4, 2));
  EXPECT_EQ(module.counts["training_step"], 2);
  EXPECT_FALSE(std::filesystem::exists(dir)) << "fast_dev_run wrote a checkpoint";
}

TEST(Trainer, OverfitBatchesUsesTheSameFirstBatchesEveryEpoch) {
  auto options = quiet().max_epochs(3).num_sanity_val_steps(0).overfit_batches(BatchAmount::count(2));
  Trainer trainer(options);
  TinyModule module;
  auto data = tiny_data(10, 2);
  data.options.shuffle(true);
  trainer.fit(module, data, tiny_data(6, 2));
  EXPECT_EQ(module.counts["training_step"], 6);
  EXPECT_EQ(module.counts["validation_step"], 6);
  const auto& firsts = module.seen_first_values;
  EXPECT_EQ(firsts[0], firsts[2]);
  EXPECT_EQ(firsts[1], firsts[3]);
  EXPECT_LT(firsts[0], firsts[1]);  // sequential, not shuffled
}

class SlowModule : public TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return TinyModule::training_step(batch, idx);
  }
};

TEST(Trainer, MaxTimeStopsTraining) {
  SlowModule module;
  Trainer trainer(quiet().max_epochs(100).max_time(0.2));
  trainer.fit(module, tiny_data(10, 2));
  EXPECT_GE(module.counts["training_step"], 3);
  EXPECT_LT(module.counts["training_step"], 30);
}

// As in Lightning, min_epochs and min_steps take precedence over max_time, and the stop validates
// first (max_time passes before the first batch here).
TEST(Trainer, MaxTimeWaitsForMinEpochsAndMinStepsAndValidatesAtTheStop) {
  ::testing::internal::CaptureStderr();
  const auto run = fit(quiet().max_epochs(10).max_time(1e-9).min_epochs(2).num_sanity_val_steps(0));
  const auto said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find(" s elapsed: min_epochs=2 kept it going)"), std::string::npos) << said;
  EXPECT_EQ(run->epochs, 2);
  EXPECT_EQ(run->global_step, 10);
  EXPECT_EQ(run->validations, 2);
  const auto steps = fit(quiet().max_epochs(10).max_time(1e-9).min_steps(3).num_sanity_val_steps(0));
  EXPECT_EQ(steps->global_step, 3);
  EXPECT_EQ(steps->validations, 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fit(quiet().max_epochs(10).max_time(1e-9))->global_step, 0);
  const auto unheld = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(unheld.find("fit stopped: max_time="), std::string::npos) << unheld;
  EXPECT_EQ(unheld.find("kept it going"), std::string::npos) << unheld;
}

class StopAtFirstEpochEnd : public Callback {
 public:
  std::string state_key() const override { return "StopAtFirstEpochEnd"; }
  void on_train_epoch_end(Trainer& trainer, TrainModule&) override { trainer.request_stop("test asked to stop"); }
};

TEST(Trainer, ShouldStopWaitsForMinEpochsAndMinSteps) {
  TinyModule module;
  Trainer trainer(quiet().max_epochs(10).min_epochs(3), {std::make_shared<StopAtFirstEpochEnd>()});
  trainer.fit(module, tiny_data(10, 2));
  EXPECT_EQ(trainer.current_epoch(), 3);
  TinyModule by_steps;
  Trainer trainer_steps(quiet().max_epochs(10).min_steps(12), {std::make_shared<StopAtFirstEpochEnd>()});
  trainer_steps.fit(by_steps, tiny_data(10, 2));
  EXPECT_EQ(trainer_steps.current_epoch(), 3);
  EXPECT_EQ(trainer_steps.stop_reason(), "test asked to stop");
}

// Asks to stop at global step `step`: after that training batch, or (`in_validation`) in the first
// validation at or after it, as EarlyStopping does. Notes the global step of every validation.
class StopAtStep : public Callback {
 public:
  StopAtStep(int64_t step, bool in_validation) : step_(step), in_validation_(in_validation) {}
  std::string state_key() const override { return "StopAtStep"; }
  void on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) override {
    if (!in_validation_ && trainer.global_step() == step_) trainer.request_stop("test asked to stop");
  }
  void on_validation_end(Trainer& trainer, TrainModule&) override {
    validated_at.push_back(trainer.global_step());
    if (in_validation_ && trainer.global_step() >= step_) trainer.request_stop("test asked to stop");
  }
  std::vector<int64_t> validated_at;

 private:
  int64_t step_;
  bool in_validation_;
};

// As Lightning's loop: a fit asked to stop mid-epoch validates first, where the epoch validates and
// no validation came after the ask; max_steps stops without one. 5 training batches an epoch.
TEST(Trainer, AStopMidEpochValidatesFirst) {
  const auto validations = [](TrainerOptions options, int64_t step, bool in_validation = false) {
    auto stop = std::make_shared<StopAtStep>(step, in_validation);
    TinyModule module;
    Trainer trainer(options.max_epochs(4).num_sanity_val_steps(0), {stop});
    trainer.fit(module, tiny_data(10, 2), tiny_data(6, 2));
    EXPECT_EQ(trainer.progress().validation_runs, static_cast<int64_t>(stop->validated_at.size()));
    return stop->validated_at;
  };
  using Steps = std::vector<int64_t>;
  EXPECT_EQ(validations(quiet(), 2), Steps({2}));
  EXPECT_EQ(validations(quiet(), 7), Steps({5, 7}));
  EXPECT_EQ(validations(quiet(), 5), Steps({5})) << "the epoch's own validation is the one before the stop";
  EXPECT_EQ(validations(quiet().check_val_every_n_epoch(2), 2), Steps()) << "epoch 0 does not validate";
  EXPECT_EQ(validations(quiet().check_val_every_n_epoch(2), 7), Steps({7}));
  EXPECT_EQ(validations(quiet().val_check_interval(BatchAmount::count(2)), 3), Steps({2, 3}));
  EXPECT_EQ(validations(quiet().val_check_interval(BatchAmount::count(2)), 2, true), Steps({2}))
      << "the validation that asked to stop is the last";
  EXPECT_EQ(validations(quiet().min_steps(4), 2), Steps({4})) << "the stop waits for min_steps, then validates";
  EXPECT_EQ(validations(quiet().max_steps(3), 99), Steps()) << "max_steps stops without validating";
}

// Lightning's line at the end of fit ("`Trainer.fit` stopped: `max_epochs=2` reached."), so that
// a run that ends sooner than meant says which option ended it.
TEST(Trainer, FitSaysWhatEndedIt) {
  const auto said = [](TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks = {}) {
    TinyModule module;
    Trainer trainer(options.limit_val_batches(BatchAmount::count(0)), std::move(callbacks));
    ::testing::internal::CaptureStderr();
    trainer.fit(module, tiny_data(10, 2));
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_NE(said(quiet().max_epochs(2)).find("fit stopped: max_epochs=2 reached"), std::string::npos);
  EXPECT_NE(said(quiet().max_epochs(5).max_steps(3)).find("fit stopped: max_steps=3 reached"), std::string::npos);
  EXPECT_NE(said(quiet().max_epochs(5).max_time(1e-9)).find("fit stopped: max_time=1e-09 s reached ("),
            std::string::npos);
  EXPECT_NE(
      said(quiet().max_epochs(5), {std::make_shared<StopAtFirstEpochEnd>()}).find("fit stopped: test asked to stop"),
      std::string::npos);
}

// As Lightning's, a second fit on one Trainer keeps the first one's epoch and step: at its limit it
// trains nothing and says why; with the limit raised it trains on, and two fits of one epoch (plain
// SGD, whose state is rebuilt by each fit's configure_optimizers) end on one two-epoch fit's weights.
TEST(Trainer, ASecondFitGoesOnFromTheFirst) {
  const auto weights = [](TinyModule& module) {
    std::vector<torch::Tensor> parts;
    for (const auto& p : module.parameters()) parts.push_back(p.detach().flatten().clone());
    return torch::cat(parts);
  };
  TinyModule in_parts, at_once;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < at_once.parameters().size(); ++i) at_once.parameters()[i].copy_(in_parts.parameters()[i]);
  }
  const auto options = quiet().max_epochs(1).limit_val_batches(BatchAmount::count(0));
  Trainer trainer(options);
  trainer.fit(in_parts, tiny_data(10, 2));
  EXPECT_EQ(trainer.current_epoch(), 1);
  EXPECT_EQ(trainer.global_step(), 5);
  const auto after_one = weights(in_parts);
  in_parts.hooks.clear();
  ::testing::internal::CaptureStderr();
  trainer.fit(in_parts, tiny_data(10, 2));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "fit stopped: max_epochs=1 reached before this fit began (this Trainer's earlier fit ended at epoch 1, "
                "global step 5): nothing was trained; raise max_epochs (Trainer::set_max_epochs) to train on"),
            std::string::npos);
  EXPECT_TRUE(torch::equal(weights(in_parts), after_one));
  EXPECT_EQ(in_parts.hooks, (std::vector<std::string>{"on_fit_start", "on_fit_end"}));
  trainer.set_max_epochs(2);
  trainer.fit(in_parts, tiny_data(10, 2));
  EXPECT_EQ(trainer.current_epoch(), 2);
  EXPECT_EQ(trainer.global_step(), 10);
  Trainer(quiet().max_epochs(2).limit_val_batches(BatchAmount::count(0))).fit(at_once, tiny_data(10, 2));
  EXPECT_TRUE(torch::equal(weights(in_parts), weights(at_once)));
  // max_steps likewise, into the middle of an epoch.
  trainer.set_max_epochs(-1);
  trainer.set_max_steps(13);
  trainer.fit(in_parts, tiny_data(10, 2));
  EXPECT_EQ(trainer.global_step(), 13);
  EXPECT_EQ(trainer.current_epoch(), 3);
  EXPECT_NE(error_of([&] {
              trainer.set_max_epochs(-2);
            }).find("set_max_epochs(-2): max_epochs must be >= 0, or -1 for no limit"),
            std::string::npos);
}

// Lightning's warning: epochs shorter than log_every_n_steps (5 batches here, 50 by default) leave
// epochs without a training step in the loggers. Without loggers there is nothing to say.
TEST(Trainer, EpochsShorterThanLogEveryNStepsSaySo) {
  const auto dir = arc::testing::process_scratch() / "sparse_logging";
  const auto said = [&](TrainerOptions options, bool with_logger) {
    TinyModule module;
    std::vector<std::shared_ptr<Logger>> loggers;
    if (with_logger) loggers.push_back(std::make_shared<CSVLogger>(dir.string()));
    Trainer trainer(options.max_epochs(1), {}, loggers);
    ::testing::internal::CaptureStderr();
    trainer.fit(module, tiny_data(10, 2));
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string warning =
      "an epoch has 5 training batches, fewer than log_every_n_steps=50, so the loggers get training steps' values "
      "only every 50 steps; set a lower log_every_n_steps to see them every epoch";
  EXPECT_NE(said(quiet(), true).find(warning), std::string::npos);
  EXPECT_EQ(said(quiet().log_every_n_steps(5), true).find("log_every_n_steps"), std::string::npos);
  EXPECT_EQ(said(quiet(), false).find("log_every_n_steps"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// As with Lightning's loggers, which make their folder on first use: a run that failed before
// writing anything (here: a checkpoint that does not exist) leaves no empty version folder, so the
// next run takes that number; one that wrote something keeps its folder.
TEST(Trainer, AFailedRunLeavesNoEmptyVersionFolder) {
  const auto dir = arc::testing::process_scratch() / "failed_version";
  std::filesystem::remove_all(dir);
  const auto logger = [&] { return std::vector<std::shared_ptr<Logger>>{std::make_shared<CSVLogger>(dir.string())}; };
  TinyModule module;
  Trainer failed(quiet(), {}, logger());
  EXPECT_THROW(failed.validate(module, tiny_data(4, 2), (dir / "absent.ckpt").string()), Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "lightning_logs"));
  Trainer logged(quiet(), {}, logger());
  logged.validate(module, tiny_data(4, 2));
  EXPECT_TRUE(std::filesystem::exists(dir / "lightning_logs" / "version_0" / "metrics.csv"));
  Trainer failed_again(quiet(), {}, logger());
  EXPECT_THROW(failed_again.validate(module, tiny_data(4, 2), (dir / "absent.ckpt").string()), Error);
  EXPECT_TRUE(std::filesystem::exists(dir / "lightning_logs" / "version_0" / "metrics.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "lightning_logs" / "version_1"));
  std::filesystem::remove_all(dir);
}

TEST(Trainer, HooksRunInLightningsOrder) {
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).limit_train_batches(BatchAmount::count(1)).num_sanity_val_steps(0));
  trainer.fit(module, tiny_data(10, 2), tiny_data(6, 2));
  const std::vector<std::string> expected = {"on_fit_start",
                                             "on_train_start",
                                             "on_train_epoch_start",
                                             "on_before_zero_grad",
                                             "on_before_backward",
                                             "on_after_backward",
                                             "on_before_optimizer_step",
                                             "on_validation_start",
                                             "on_validation_end",
                                             "on_train_epoch_end",
                                             "on_train_end",
                                             "on_fit_end"};
  EXPECT_EQ(module.hooks, expected);
}

// The data hooks are one DataHooks base's, as Lightning's: the data module's run before the
// module's (teardown after), and a module's own prepare_data runs as a data module's does.
TEST(Trainer, DataHooksRunForTheDataModuleThenTheModule) {
  std::vector<std::string> calls;
  struct Module : TinyModule {
    explicit Module(std::vector<std::string>& calls) : calls(calls) {}
    void prepare_data() override { calls.push_back("module:prepare_data"); }
    void setup(Stage stage) override { calls.push_back(std::string("module:setup:") + to_string(stage)); }
    void teardown(Stage stage) override { calls.push_back(std::string("module:teardown:") + to_string(stage)); }
    std::vector<std::string>& calls;
  } module(calls);
  struct Data : DataModule {
    explicit Data(std::vector<std::string>& calls) : calls(calls) {}
    void prepare_data() override { calls.push_back("data:prepare_data"); }
    void setup(Stage stage) override { calls.push_back(std::string("data:setup:") + to_string(stage)); }
    DataSource train_dataloader() override { return tiny_data(4, 2); }
    void teardown(Stage stage) override { calls.push_back(std::string("data:teardown:") + to_string(stage)); }
    std::vector<std::string>& calls;
  } data(calls);
  Trainer(quiet().max_epochs(1)).fit(module, data);
  Trainer(quiet()).validate(module, tiny_data(4, 2));
  EXPECT_EQ(calls,
            (std::vector<std::string>{"data:prepare_data", "module:prepare_data", "data:setup:fit", "module:setup:fit",
                                      "module:teardown:fit", "data:teardown:fit", "module:prepare_data",
                                      "module:setup:validate", "module:teardown:validate"}));
}

// A callback that writes "callback:<hook>" into the module's record of hooks.
class RecordIntoModule : public Callback {
 public:
  std::string state_key() const override { return "RecordIntoModule"; }
  void on_train_epoch_start(Trainer&, TrainModule& m) override { record(m, "on_train_epoch_start"); }
  void on_before_zero_grad(Trainer&, TrainModule& m, torch::optim::Optimizer&) override {
    record(m, "on_before_zero_grad");
  }
  void on_before_backward(Trainer&, TrainModule& m, const torch::Tensor&) override { record(m, "on_before_backward"); }
  void on_after_backward(Trainer&, TrainModule& m) override { record(m, "on_after_backward"); }
  void on_before_optimizer_step(Trainer&, TrainModule& m, torch::optim::Optimizer&) override {
    record(m, "on_before_optimizer_step");
  }

 private:
  static void record(TrainModule& module, const std::string& hook) {
    dynamic_cast<TinyModule&>(module).hooks.push_back("callback:" + hook);
  }
};

// Lightning calls every callback's hook before the module's, for each hook both have.
TEST(Trainer, CallbacksHooksRunBeforeTheModules) {
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1).limit_train_batches(BatchAmount::count(1)).num_sanity_val_steps(0),
                  {std::make_shared<RecordIntoModule>()});
  trainer.fit(module, tiny_data(10, 2));
  const std::vector<std::string> expected = {"on_fit_start",
                                             "on_train_start",
                                             "callback:on_train_epoch_start",
                                             "on_train_epoch_start",
                                             "callback:on_before_zero_grad",
                                             "on_before_zero_grad",
                                             "callback:on_before_backward",
                                             "on_before_backward",
                                             "callback:on_after_backward",
                                             "on_after_backward",
                                             "callback:on_before_optimizer_step",
                                             "on_before_optimizer_step",
                                             "on_train_epoch_end",
                                             "on_train_end",
                                             "on_fit_end"};
  EXPECT_EQ(module.hooks, expected);
}

TEST(Trainer, ValidateTestAndPredictReturnResults) {
  TinyModule module;
  Trainer trainer(quiet());
  const auto val = trainer.validate(module, tiny_data(6, 2));
  EXPECT_EQ(val.count("val_loss"), 1u);
  const auto test = trainer.test(module, tiny_data(6, 4));
  EXPECT_EQ(module.counts["test_step"], 2);
  EXPECT_GT(test.at("test_loss"), 0.0);
  const auto predictions = trainer.predict(module, tiny_data(5, 2));
  ASSERT_EQ(predictions.size(), 3u);
  EXPECT_EQ(predictions[2].size(0), 1);
  EXPECT_TRUE(module.is_training());
}

// Lightning's return_predictions=False: predict keeps nothing, and a callback still sees each batch's
// output.
TEST(Trainer, PredictWithoutReturningKeepsNothingAndCallbacksSeeEveryOutput) {
  struct Rows : Callback {
    int64_t rows = 0;
    std::string state_key() const override { return "Rows"; }
    void on_predict_batch_end(Trainer&, TrainModule&, const torch::Tensor& outputs, Batch&, int64_t) override {
      rows += outputs.size(0);
    }
  };
  TinyModule module;
  auto rows = std::make_shared<Rows>();
  Trainer trainer(quiet(), {rows});
  EXPECT_TRUE(trainer.predict(module, tiny_data(5, 2), "", /*return_predictions=*/false).empty());
  EXPECT_EQ(rows->rows, 5);
  EXPECT_EQ(trainer.predict(module, tiny_data(5, 2)).size(), 3u);
}

// As Lightning's trainer.validate(verbose=True) and trainer.test: a table on standard output after
// the pass, none after fit's own validation, none with verbose off.
TEST(Trainer, ValidateAndTestPrintTheirMetricsUnlessToldNotTo) {
  TinyModule module;
  Trainer trainer(quiet().max_epochs(1));
  ::testing::internal::CaptureStdout();
  trainer.fit(module, tiny_data(4, 2), tiny_data(4, 2));
  const std::string after_fit = ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStdout();
  const auto val = trainer.validate(module, {tiny_data(6, 2), tiny_data(4, 2)});
  const std::string after_validate = ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStdout();
  trainer.test(module, tiny_data(6, 4), "", false);
  const std::string after_quiet_test = ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStdout();
  trainer.test(module, tiny_data(6, 4));
  const std::string after_test = ::testing::internal::GetCapturedStdout();

  EXPECT_EQ(after_fit, "");
  EXPECT_EQ(after_quiet_test, "");
  const auto header = after_validate.find("Validate metric");
  ASSERT_NE(header, std::string::npos) << after_validate;
  EXPECT_NE(after_validate.find("DataLoader 1", header), std::string::npos) << after_validate;
  const auto row = after_validate.find("val_loss");
  ASSERT_NE(row, std::string::npos) << after_validate;
  const std::string line = after_validate.substr(row, after_validate.find('\n', row) - row);
  for (const char* key : {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"})
    EXPECT_NE(line.find(fmt::format("{}", val.at(key))), std::string::npos) << key << " in: " << line;
  EXPECT_NE(after_test.find("Test metric"), std::string::npos) << after_test;
  EXPECT_NE(after_test.find("test_loss"), std::string::npos) << after_test;
}

TEST(Trainer, ValidationLossIsTheSampleWeightedMean) {
  TinyModule module;
  Trainer trainer(quiet());
  const auto data = tiny_data(5, 2);
  const auto metrics = trainer.validate(module, data);
  torch::NoGradGuard no_grad;
  const auto all = data.dataset->get_batch({0, 1, 2, 3, 4});
  const double expected = torch::mse_loss(module.linear(all[0]), all[1]).item<double>();
  EXPECT_NEAR(metrics.at("val_loss"), expected, 1e-5 * expected);
}

struct Dataful : public TinyModule {
  DataSource train_dataloader() override { return tiny_data(8, 4); }
};

TEST(Trainer, ModuleOwnedDataAndDataModulesAreUsed) {
  Dataful module;
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module);
  EXPECT_EQ(module.counts["training_step"], 2);

  struct Data : DataModule {
    int setups = 0;
    void setup(Stage) override { ++setups; }
    DataSource train_dataloader() override { return tiny_data(6, 2); }
  } data;
  TinyModule plain;
  Trainer second(quiet().max_epochs(1));
  second.fit(plain, data);
  EXPECT_EQ(plain.counts["training_step"], 3);
  EXPECT_EQ(data.setups, 1);
}

TEST(Trainer, MissingDataAndStepsAreClearErrors) {
  TinyModule module;
  Trainer trainer(quiet());
  try {
    trainer.fit(module);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no train data"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(module.attached());
}

TEST(Trainer, BadStrategyAndAcceleratorChoicesAreErrors) {
  try {
    Trainer trainer(quiet().strategy("singel_device"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean 'single_device'"), std::string::npos) << error.what();
  }
  if (!torch::cuda::is_available()) {
    try {
      Trainer trainer(quiet().accelerator("gpu"));
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("no CUDA device is available"), std::string::npos) << error.what();
    }
  }
}

// Where accelerator "auto" took the GPU, a count beyond the GPUs most likely meant processes on the
// CPU (`devices(2)` on a machine with one GPU): the error says how to ask for them. Where "gpu" was
// named, it does not.
TEST(Trainer, MoreDevicesThanGpusUnderAutoSayHowToRunOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: accelerator \"auto\" takes the CPU here";
  const auto too_many = Devices::of_count(static_cast<int64_t>(torch::cuda::device_count()) + 1);
  for (const std::string name : {"auto", "gpu"}) {
    try {
      resolve_accelerator(name)->select(too_many);
      ADD_FAILURE() << "expected an error under accelerator " << name;
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("asks for more GPUs than the"), std::string::npos) << message;
      EXPECT_EQ(message.find("set accelerator to \"cpu\"") != std::string::npos, name == "auto") << message;
    }
  }
}

TEST(Trainer, LoggersReceiveStepMetricsEveryNSteps) {
  struct Recorder : Logger {
    std::vector<int64_t> steps;
    std::string finished;
    std::string name() const override { return "recorder"; }
    void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
      if (metrics.count("train_loss")) steps.push_back(step);
    }
    void finalize(const std::string& status) override { finished = status; }
  };
  auto recorder = std::make_shared<Recorder>();
  TinyModule module;
  Trainer trainer(quiet().max_epochs(2).log_every_n_steps(3), {}, {recorder});
  trainer.fit(module, tiny_data(10, 2));
  // Lightning's step: the stepped batches before the logged one.
  EXPECT_EQ(recorder->steps, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(recorder->finished, "success");
}

// Lightning's detect_anomaly: a backward that makes NaN fails naming the operation; without it the
// fit runs on with NaN weights.
class NanInBackward : public testing::TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t index) override {
    return TinyModule::training_step(batch, index) + torch::sqrt(linear->bias.sum() * 0.0 - 1.0);
  }
};

TEST(Trainer, DetectAnomalyNamesTheBackwardThatMadeNan) {
  NanInBackward module;
  try {
    Trainer(testing::quiet().max_steps(2).detect_anomaly(true)).fit(module, testing::tiny_data(8, 2));
    FAIL() << "detect_anomaly let a NaN gradient pass";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("SqrtBackward"), std::string::npos) << error.what();
  }
  NanInBackward unchecked;
  Trainer(testing::quiet().max_steps(2)).fit(unchecked, testing::tiny_data(8, 2));
  EXPECT_TRUE(torch::isnan(unchecked.linear->bias).all().item<bool>());
}

// Lightning's inference_mode: evaluation under LibTorch's inference mode, or under no_grad when off.
class GradModeProbe : public testing::TinyModule {
 public:
  void validation_step(Batch& batch, int64_t index) override {
    inference = c10::InferenceMode::is_enabled();
    grad = torch::GradMode::is_enabled();
    TinyModule::validation_step(batch, index);
  }
  bool inference = false;
  bool grad = true;
};

TEST(Trainer, EvaluationRunsInInferenceModeOrUnderNoGrad) {
  GradModeProbe module;
  Trainer(testing::quiet()).validate(module, testing::tiny_data(4, 2));
  EXPECT_TRUE(module.inference);
  EXPECT_FALSE(module.grad);
  GradModeProbe no_grad;
  Trainer(testing::quiet().inference_mode(false)).validate(no_grad, testing::tiny_data(4, 2));
  EXPECT_FALSE(no_grad.inference);
  EXPECT_FALSE(no_grad.grad);
  // Training after an evaluation in inference mode still learns.
  Trainer trainer(testing::quiet().max_epochs(1).num_sanity_val_steps(2));
  const auto before = module.linear->weight.clone();
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(4, 2));
  EXPECT_FALSE(torch::equal(before, module.linear->weight));
}

// Lightning's barebones mode: fit trains and validates, and leaves nothing behind (no checkpoint,
// no log folder, no metric: log() is ignored); loggers or a checkpoint callback given to it are errors.
TEST(Trainer, BarebonesTrainsAndLeavesNothingBehind) {
  const auto dir = arc::testing::process_scratch() / "barebones";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto options = TrainerOptions().num_threads(1).max_epochs(2).default_root_dir(dir.string()).barebones(true);
  TinyModule module;
  const auto before = testing::weights_of(module).clone();
  Trainer trainer(options);
  trainer.fit(module, tiny_data(8, 2), tiny_data(4, 2));
  EXPECT_FALSE(torch::equal(before, testing::weights_of(module)));
  EXPECT_EQ(module.counts["training_step"], 8);
  EXPECT_EQ(module.counts["validation_step"], 4) << "two epochs of two batches, no sanity check";
  EXPECT_TRUE(trainer.callback_metrics().empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  const auto error_of = [&](std::vector<std::shared_ptr<Callback>> callbacks,
                            std::vector<std::shared_ptr<Logger>> loggers) -> std::string {
    try {
      Trainer(options, std::move(callbacks), std::move(loggers));
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_NE(error_of({}, {std::make_shared<CSVLogger>(dir.string())})
                .find("barebones=true, but the Trainer was given 1 logger(s)"),
            std::string::npos);
  EXPECT_NE(error_of({std::make_shared<ModelCheckpoint>()}, {})
                .find("barebones=true, but the Trainer was given a ModelCheckpoint callback"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// In one process all_gather keeps the world dimension ([1, ...]), and a loss through it with
// sync_grads trains as the loss without it.
class Gathering : public TinyModule {
 public:
  explicit Gathering(bool gather) : gather_(gather) {}
  torch::Tensor training_step(Batch& batch, int64_t) override {
    auto out = linear(batch[0]);
    if (gather_) {
      const auto gathered = all_gather(out, true);
      shapes.push_back(gathered.sizes().vec());
      out = gathered.flatten(0, 1);
    }
    return torch::mse_loss(out, batch[1]);
  }
  std::vector<std::vector<int64_t>> shapes;

 private:
  bool gather_;
};

TEST(Trainer, AllGatherInOneProcessHasTheWorldDimension) {
  torch::manual_seed(0);
  Gathering gathering(true);
  torch::manual_seed(0);
  Gathering plain(false);
  Trainer(quiet().max_epochs(1)).fit(gathering, tiny_data(6, 3));
  Trainer(quiet().max_epochs(1)).fit(plain, tiny_data(6, 3));
  EXPECT_EQ(gathering.shapes, (std::vector<std::vector<int64_t>>{{1, 3, 1}, {1, 3, 1}}));
  EXPECT_TRUE(torch::equal(testing::weights_of(gathering), testing::weights_of(plain)));
}

}  // namespace
}  // namespace arc
