// The smaller callbacks: LambdaCallback, Timer, LearningRateMonitor, OnExceptionCheckpoint,
// ThroughputMonitor, GradientAccumulationScheduler.
#include "support/command.h"
#include "support/errors.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <thread>

namespace arc {
namespace {

using testing::error_of;
using testing::quiet;
using testing::tiny_data;
using testing::TinyModule;

struct Recorder : Logger {
  std::vector<std::pair<int64_t, std::map<std::string, double>>> records;
  std::string name() const override { return "recorder"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    records.emplace_back(step, metrics);
  }
  std::vector<double> values(const std::string& key) const {
    std::vector<double> out;
    for (const auto& [step, metrics] : records)
      if (metrics.count(key)) out.push_back(metrics.at(key));
    return out;
  }
};

struct Slow : TinyModule {
  torch::Tensor training_step(Batch& batch, int64_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return TinyModule::training_step(batch, i);
  }
};

TEST(Callbacks, TimerStopsFitAfterItsDuration) {
  Slow module;
  auto timer = std::make_shared<Timer>(0.15);
  Trainer trainer(quiet().max_epochs(100), {timer});
  trainer.fit(module, tiny_data(6, 2));
  EXPECT_LT(module.counts["training_step"], 20);
  EXPECT_GE(timer->elapsed(), 0.15);
  EXPECT_NE(trainer.stop_reason().find("Timer"), std::string::npos);
  EXPECT_THROW(Timer(0), Error);
}

// From a config, as Lightning's Timer: a duration in any of its forms, checked at each training
// epoch's end with interval "epoch" (so the stop comes after a whole epoch of 3 batches).
TEST(Callbacks, TimerFromAConfigTakesLightningsDurationsAndInterval) {
  const auto timers = callbacks_from_json(
      {{{"class_path", "lightning.pytorch.callbacks.Timer"},
        {"init_args", {{"duration", {{"seconds", 0.05}}}, {"interval", "epoch"}, {"verbose", true}}}}},
      "trainer.callbacks");
  Slow module;
  Trainer trainer(quiet().max_epochs(100), timers);
  trainer.fit(module, tiny_data(6, 2));
  EXPECT_EQ(module.counts["training_step"] % 3, 0);
  EXPECT_LT(module.counts["training_step"], 300);
  EXPECT_NE(trainer.stop_reason().find("Timer"), std::string::npos);
  const auto remaining = [](const nlohmann::json& duration) {
    const auto built = callbacks_from_json({{{"class_path", "Timer"}, {"init_args", {{"duration", duration}}}}}, "c");
    return std::dynamic_pointer_cast<Timer>(built.at(0))->time_remaining();
  };
  EXPECT_NEAR(remaining("00:12:00:00"), 12 * 3600.0, 60.0);
  EXPECT_NEAR(remaining({{"days", 1}, {"minutes", 2}}), 86400.0 + 120.0, 60.0);
  EXPECT_EQ(remaining(nullptr), std::numeric_limits<double>::infinity());
  try {
    callbacks_from_json({{{"class_path", "Timer"}, {"init_args", {{"duration", "12 hours"}}}}}, "c");
    FAIL() << "a duration of \"12 hours\" was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'c[0].init_args.duration' must be seconds, \"DD:HH:MM:SS\""),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(Timer(1, "batch"), Error);
}

struct Scheduled : TinyModule {
  std::vector<OptimizerConfig> configure_optimizers() override {
    auto sgd = std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(1.0));
    return {OptimizerConfig(sgd, SchedulerConfig{std::make_shared<ExponentialLR>(*sgd, 0.5), Interval::epoch, 1, ""})};
  }
};

TEST(Callbacks, LearningRateMonitorLogsEveryEpochsRate) {
  auto recorder = std::make_shared<Recorder>();
  Scheduled module;
  Trainer(quiet().max_epochs(3), {std::make_shared<LearningRateMonitor>()}, {recorder}).fit(module, tiny_data(4, 2));
  EXPECT_EQ(recorder->values("lr-SGD"), (std::vector<double>{1.0, 0.5, 0.25}));
  EXPECT_THROW(LearningRateMonitor("batch"), Error);
}

// Unset (Lightning's None, a config's default), an optimizer with a scheduler is logged at its
// scheduler's interval, one without at every logged batch and every epoch start.
TEST(Callbacks, LearningRateMonitorUnsetFollowsEachSchedulersInterval) {
  const auto logged = [](TinyModule& module) {
    auto recorder = std::make_shared<Recorder>();
    Trainer(quiet().max_epochs(3).log_every_n_steps(1), {std::make_shared<LearningRateMonitor>(std::nullopt)},
            {recorder})
        .fit(module, tiny_data(4, 2));
    return recorder->values("lr-SGD");
  };
  Scheduled scheduled;
  EXPECT_EQ(logged(scheduled), (std::vector<double>{1.0, 0.5, 0.25}));
  TinyModule plain;
  EXPECT_EQ(logged(plain).size(), 9u);  // 3 epochs: the start and 2 logged batches each
  EXPECT_THROW(LearningRateMonitor(std::string("batch")), Error);
}

// log_momentum and log_weight_decay add "<name>-momentum" (beta1 for Adam) and "<name>-weight_decay".
struct WithMomentum : TinyModule {
  std::vector<OptimizerConfig> configure_optimizers() override {
    return {std::make_shared<torch::optim::SGD>(parameters(),
                                                torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01))};
  }
};

TEST(Callbacks, LearningRateMonitorLogsMomentumAndWeightDecayWhenAsked) {
  auto recorder = std::make_shared<Recorder>();
  WithMomentum module;
  Trainer(quiet().max_epochs(1), {std::make_shared<LearningRateMonitor>("epoch", true, true)}, {recorder})
      .fit(module, tiny_data(4, 2));
  EXPECT_EQ(recorder->values("lr-SGD"), (std::vector<double>{0.1}));
  EXPECT_EQ(recorder->values("lr-SGD-momentum"), (std::vector<double>{0.9}));
  EXPECT_EQ(recorder->values("lr-SGD-weight_decay"), (std::vector<double>{0.01}));
  auto plain = std::make_shared<Recorder>();
  WithMomentum again;
  Trainer(quiet().max_epochs(1), {std::make_shared<LearningRateMonitor>()}, {plain}).fit(again, tiny_data(4, 2));
  EXPECT_TRUE(plain->values("lr-SGD-momentum").empty());
}

// Lightning's names: the optimizer's class, "-1" for a second one of the same class, "/pg1".. for
// parameter groups.
struct ManyOptimizers : TinyModule {
  ManyOptimizers() { set_automatic_optimization(false); }
  torch::Tensor training_step(Batch& batch, int64_t index) override {
    return TinyModule::training_step(batch, index).detach();
  }
  std::vector<OptimizerConfig> configure_optimizers() override {
    std::vector<torch::optim::OptimizerParamGroup> groups = {{{linear->weight}}, {{linear->bias}}};
    return {std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1)),
            std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.2)),
            std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.3))};
  }
};

TEST(Callbacks, LearningRateMonitorNamesRatesAsLightningDoes) {
  ManyOptimizers module;
  Trainer trainer(quiet().max_epochs(1));
  trainer.fit(module, tiny_data(4, 2));
  EXPECT_EQ(
      LearningRateMonitor::rates(trainer),
      (std::map<std::string, double>{{"lr-SGD/pg1", 0.1}, {"lr-SGD/pg2", 0.1}, {"lr-SGD-1", 0.2}, {"lr-Adam", 0.3}}));
}

TEST(Callbacks, LearningRateMonitorByStepLogsOnTheBatchesWhoseMetricsAreLogged) {
  auto recorder = std::make_shared<Recorder>();
  TinyModule module;
  // 8 batches, logged every 2nd: batches 1, 3, 5 and 7 (0-based), the rates before their optimizer
  // step, both at Lightning's step (the stepped batches before the logged one).
  Trainer(quiet().max_epochs(1).log_every_n_steps(2), {std::make_shared<LearningRateMonitor>("step")}, {recorder})
      .fit(module, tiny_data(16, 2));
  std::vector<int64_t> lr_steps, loss_steps;
  for (const auto& [step, metrics] : recorder->records) {
    if (metrics.count("lr-SGD")) lr_steps.push_back(step);
    if (metrics.count("train_loss")) loss_steps.push_back(step);
  }
  EXPECT_EQ(lr_steps, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(loss_steps, (std::vector<int64_t>{1, 3, 5, 7}));
}

TEST(Callbacks, DeviceStatsMonitorLogsCpuFiguresAroundTheLoggedBatches) {
  auto recorder = std::make_shared<Recorder>();
  TinyModule module;
  // 8 batches, logged every 2nd: 4 records from each hook.
  Trainer(quiet().max_epochs(1).log_every_n_steps(2), {std::make_shared<DeviceStatsMonitor>()}, {recorder})
      .fit(module, tiny_data(16, 2));
  const std::string start = "DeviceStatsMonitor.on_train_batch_start/";
  const std::string end = "DeviceStatsMonitor.on_train_batch_end/";
  for (const auto& name : {"cpu_percent", "cpu_vm_percent", "cpu_swap_percent"})
    for (const auto& prefix : {start, end}) {
      const auto values = recorder->values(prefix + name);
      ASSERT_EQ(values.size(), 4u) << prefix << name;
      for (const double value : values) {
        EXPECT_GE(value, 0.0) << prefix << name;
        EXPECT_LE(value, 100.0) << prefix << name;
      }
    }
  EXPECT_GT(recorder->values(start + "cpu_vm_percent").front(), 0.0);
  // A process with LibTorch loaded holds tens of megabytes at least.
  for (const double mb : recorder->values(end + "cpu_rss_mb")) EXPECT_GT(mb, 20.0);
}

TEST(Callbacks, DeviceStatsMonitorLogsTheCudaAllocatorsFiguresOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA allocator's figures exist on a GPU only";
  auto recorder = std::make_shared<Recorder>();
  TinyModule module;
  Trainer(quiet().max_epochs(1).log_every_n_steps(2).accelerator("gpu").devices(Devices::of_count(1)),
          {std::make_shared<DeviceStatsMonitor>(false)}, {recorder})
      .fit(module, tiny_data(16, 2));
  EXPECT_TRUE(module.linear->weight.is_cuda());
  const std::string end = "DeviceStatsMonitor.on_train_batch_end/";
  for (const auto& name : {"allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.peak"}) {
    const auto values = recorder->values(end + name);
    ASSERT_EQ(values.size(), 4u) << name;
    for (const double bytes : values) EXPECT_GT(bytes, 0.0) << name;
  }
  EXPECT_EQ(recorder->values(end + "num_ooms"), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_TRUE(recorder->values(end + "cpu_percent").empty());
}

TEST(Callbacks, DeviceStatsMonitorWithoutCpuStatsOnTheCpuLogsNothingAndNeedsALogger) {
  auto recorder = std::make_shared<Recorder>();
  TinyModule module;
  Trainer(quiet().max_epochs(1), {std::make_shared<DeviceStatsMonitor>(false)}, {recorder})
      .fit(module, tiny_data(8, 2));
  EXPECT_TRUE(recorder->values("DeviceStatsMonitor.on_train_batch_start/cpu_percent").empty());
  TinyModule other;
  Trainer without_loggers(quiet().max_epochs(1), {std::make_shared<DeviceStatsMonitor>()});
  try {
    without_loggers.fit(other, tiny_data(8, 2));
    ADD_FAILURE() << "fit without a logger should fail";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("add a logger"), std::string::npos) << error.what();
  }
}

struct FailsAtStep3 : TinyModule {
  torch::Tensor training_step(Batch& batch, int64_t i) override {
    if (global_step() == 3) throw std::runtime_error("boom");
    return TinyModule::training_step(batch, i);
  }
};

TEST(Callbacks, OnExceptionCheckpointSavesWhatWasDone) {
  const auto dir = arc::testing::process_scratch() / "onexc";
  auto saver = std::make_shared<OnExceptionCheckpoint>(dir.string());
  FailsAtStep3 module;
  Trainer trainer(quiet().max_epochs(5), {saver});
  EXPECT_THROW(trainer.fit(module, tiny_data(4, 2)), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(saver->path()));
  TinyModule resumed;
  Trainer again(quiet().max_epochs(2));
  again.fit(resumed, tiny_data(4, 2), {}, saver->path());
  EXPECT_EQ(again.global_step(), 4);
  EXPECT_EQ(resumed.counts["training_step"], 1);
  std::filesystem::remove_all(dir);
}

// A fit that fails before training starts leaves the file alone: here it resumes from its own
// exception checkpoint into a module of another shape, and the checkpoint (three steps of work)
// must still be there to resume from once the module is right.
TEST(Callbacks, OnExceptionCheckpointKeepsTheFileAFailedResumeReadFrom) {
  const auto dir = arc::testing::process_scratch() / "onexc_resume";
  auto saver = std::make_shared<OnExceptionCheckpoint>(dir.string());
  FailsAtStep3 module;
  EXPECT_THROW(Trainer(quiet().max_epochs(5), {saver}).fit(module, tiny_data(4, 2)), std::runtime_error);
  const auto saved = testing::read_file(saver->path());
  ASSERT_FALSE(saved.empty());
  struct Wider : TinyModule {
    Wider() { linear = replace_module("linear", torch::nn::Linear(4, 2)); }
  } wider;
  Trainer wrong(quiet().max_epochs(5), {saver});
  // The error names the module the checkpoint was written for (and would name its hyperparameters).
  const auto mismatch = error_of([&] { wrong.fit(wider, tiny_data(4, 2), {}, saver->path()); });
  EXPECT_NE(mismatch.find("does not match TinyModule: 'linear.weight' has shape [1,4], the module has [2,4]; "
                          "'linear.bias' has shape [1], the module has [2]. It was written for TinyModule; load it"),
            std::string::npos)
      << mismatch;
  EXPECT_TRUE(saver->exception_checkpoint().empty());
  EXPECT_TRUE(testing::read_file(saver->path()) == saved) << "the checkpoint resumed from was rewritten";
  TinyModule resumed;
  Trainer again(quiet().max_epochs(2), {saver});
  again.fit(resumed, tiny_data(4, 2), {}, saver->path());
  EXPECT_EQ(again.global_step(), 4);
  std::filesystem::remove_all(dir);
}

// Empty and negative settings of the checkpointing callbacks: Lightning's meaning where it has one
// (an empty ModelCheckpoint filename is the default name, an empty OnExceptionCheckpoint dirpath the
// current folder, not the root), else an error that names the setting.
TEST(Callbacks, CheckpointingCallbacksTakeEmptyAndNegativeSettingsAsLightningOrSayWhy) {
  const auto dir = arc::testing::process_scratch() / "empty_names";
  TinyModule module;
  Trainer(quiet().max_epochs(1),
          {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().dirpath(dir.string()).filename(""))})
      .fit(module, tiny_data(4, 2));
  EXPECT_TRUE(std::filesystem::exists(dir / "epoch=0-step=2.ckpt"));
  EXPECT_FALSE(std::filesystem::exists(dir / ".ckpt"));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(OnExceptionCheckpoint("", "saved").path(), "saved.ckpt");
  EXPECT_NE(error_of([&] { OnExceptionCheckpoint(dir.string(), ""); }).find("filename is empty"), std::string::npos);
  const auto interval = error_of([] { ModelCheckpoint(ModelCheckpointOptions().train_time_interval(-5)); });
  EXPECT_NE(interval.find("train_time_interval must be >= 0 seconds (0: off), got -5"), std::string::npos) << interval;
  const auto elastic = error_of([] { ElasticCheckpoint(-1, 0); });
  EXPECT_NE(elastic.find("every_n_steps is -1 and every_seconds 0"), std::string::npos) << elastic;
  EXPECT_NE(error_of([] { ElasticCheckpoint(10, -3); }).find("every_seconds -3"), std::string::npos);
}

// Every hook, as Lightning's LambdaCallback takes any: each function runs at its hook, as often as
// the hook runs, through fit (with a sanity check and validation), a checkpoint save, test,
// predict, a resumed fit and a failed one.
TEST(Callbacks, LambdaCallbackTakesEveryHook) {
  std::map<std::string, int> calls;
  std::vector<Stage> stages;
  const auto counting = [&calls](const char* hook) { return [&calls, hook](auto&&...) { ++calls[hook]; }; };
  auto lambda = std::make_shared<LambdaCallback>();
  lambda->on_setup = [&](Trainer&, TrainModule&, Stage stage) { stages.push_back(stage); };
  lambda->on_teardown = counting("teardown");
  lambda->fit_start = counting("fit_start");
  lambda->fit_end = counting("fit_end");
  lambda->sanity_check_start = counting("sanity_check_start");
  lambda->sanity_check_end = counting("sanity_check_end");
  lambda->train_start = counting("train_start");
  lambda->train_end = counting("train_end");
  lambda->validation_start = counting("validation_start");
  lambda->validation_end = counting("validation_end");
  lambda->test_start = counting("test_start");
  lambda->test_end = counting("test_end");
  lambda->predict_start = counting("predict_start");
  lambda->predict_end = counting("predict_end");
  lambda->train_epoch_start = counting("train_epoch_start");
  lambda->train_epoch_end = counting("train_epoch_end");
  lambda->validation_epoch_start = counting("validation_epoch_start");
  lambda->validation_epoch_end = counting("validation_epoch_end");
  lambda->test_epoch_start = counting("test_epoch_start");
  lambda->test_epoch_end = counting("test_epoch_end");
  lambda->predict_epoch_end = counting("predict_epoch_end");
  lambda->after_backward = counting("after_backward");
  lambda->train_batch_start = counting("train_batch_start");
  lambda->train_batch_end = [&](Trainer&, TrainModule&, const torch::Tensor& loss, Batch&, int64_t) {
    EXPECT_TRUE(loss.defined());
    ++calls["train_batch_end"];
  };
  lambda->predict_batch_end = [&](Trainer&, TrainModule&, const torch::Tensor& outputs, Batch& batch, int64_t) {
    EXPECT_EQ(outputs.size(0), batch.batch_size());
    ++calls["predict_batch_end"];
  };
  lambda->validation_batch_start = counting("validation_batch_start");
  lambda->validation_batch_end = counting("validation_batch_end");
  lambda->test_batch_start = counting("test_batch_start");
  lambda->test_batch_end = counting("test_batch_end");
  lambda->before_backward = counting("before_backward");
  lambda->before_optimizer_step = counting("before_optimizer_step");
  lambda->before_zero_grad = counting("before_zero_grad");
  lambda->exception = [&](Trainer&, TrainModule&, const std::exception& error) {
    EXPECT_STREQ(error.what(), "boom");
    ++calls["exception"];
  };
  lambda->save_checkpoint = counting("save_checkpoint");
  lambda->load_checkpoint = counting("load_checkpoint");

  TinyModule module;
  const auto path = (testing::process_scratch() / "lambda.ckpt").string();
  Trainer trainer(quiet().max_epochs(1), {lambda});
  trainer.fit(module, tiny_data(4, 2), tiny_data(2, 2));
  trainer.save_checkpoint(path);
  trainer.test(module, tiny_data(4, 2));
  trainer.predict(module, tiny_data(6, 2));
  Trainer resumed(quiet().max_epochs(2), {lambda});
  resumed.fit(module, tiny_data(4, 2), {}, path);
  EXPECT_EQ(resumed.global_step(), 4);
  FailsAtStep3 failing;
  EXPECT_THROW(Trainer(quiet().max_epochs(5), {lambda}).fit(failing, tiny_data(4, 2)), std::runtime_error);
  // Trained batches: 2 in the first fit, 2 resumed, 3 before the failure at the fourth.
  const std::map<std::string, int> expected = {{"fit_start", 3},
                                               {"fit_end", 2},
                                               {"sanity_check_start", 1},
                                               {"sanity_check_end", 1},
                                               {"train_start", 3},
                                               {"train_end", 2},
                                               {"train_epoch_start", 4},
                                               {"train_epoch_end", 3},
                                               {"train_batch_start", 8},
                                               {"train_batch_end", 7},
                                               {"before_backward", 7},
                                               {"after_backward", 7},
                                               {"before_optimizer_step", 7},
                                               {"before_zero_grad", 7},
                                               {"validation_start", 2},
                                               {"validation_end", 2},
                                               {"validation_epoch_start", 2},
                                               {"validation_epoch_end", 2},
                                               {"validation_batch_start", 2},
                                               {"validation_batch_end", 2},
                                               {"test_start", 1},
                                               {"test_end", 1},
                                               {"test_epoch_start", 1},
                                               {"test_epoch_end", 1},
                                               {"test_batch_start", 2},
                                               {"test_batch_end", 2},
                                               {"predict_start", 1},
                                               {"predict_end", 1},
                                               {"predict_epoch_end", 1},
                                               {"predict_batch_end", 3},
                                               {"save_checkpoint", 1},
                                               {"load_checkpoint", 1},
                                               {"exception", 1},
                                               {"teardown", 4}};
  EXPECT_EQ(calls, expected);
  EXPECT_EQ(stages, (std::vector<Stage>{Stage::fit, Stage::test, Stage::predict, Stage::fit, Stage::fit}));
}

TEST(Callbacks, ThroughputMonitorLogsSamplesPerSecond) {
  auto recorder = std::make_shared<Recorder>();
  auto monitor = std::make_shared<ThroughputMonitor>(2);
  TinyModule module;
  Trainer(quiet().max_epochs(1), {monitor}, {recorder}).fit(module, tiny_data(8, 2));
  const auto rates = recorder->values("throughput/samples_per_sec");
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_GT(rates.front(), 0.0);
  EXPECT_GT(monitor->last_samples_per_sec(), 0.0);
  EXPECT_TRUE(recorder->values("throughput/flops_per_sec").empty()) << "no FLOPs without flops_per_sample";
  EXPECT_EQ(recorder->values("throughput/device/samples_per_sec"), rates) << "one rank: the device is all";
}

// Told the FLOPs of a sample and a device's peak, it logs FLOPs per second and the model FLOPs
// utilization, as Lightning's (one rank here: the device's figures are the run's).
TEST(Callbacks, ThroughputMonitorLogsFlopsAndMfuWhenToldTheModelsFlops) {
  auto recorder = std::make_shared<Recorder>();
  const auto options = nlohmann::json::parse(
      R"([{"class_path": "ThroughputMonitor", "init_args": {"every_n_steps": 2, "flops_per_sample": 48, "available_flops": 1e6}}])");
  TinyModule module;
  Trainer(quiet().max_epochs(1), callbacks_from_json(options, "callbacks"), {recorder}).fit(module, tiny_data(8, 2));
  const auto samples = recorder->values("throughput/samples_per_sec");
  const auto flops = recorder->values("throughput/flops_per_sec");
  const auto device = recorder->values("throughput/device/flops_per_sec");
  const auto mfu = recorder->values("throughput/device/mfu");
  ASSERT_EQ(samples.size(), 2u);
  ASSERT_EQ(flops.size(), 2u);
  ASSERT_EQ(mfu.size(), 2u);
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_DOUBLE_EQ(flops[i], samples[i] * 48);
    EXPECT_DOUBLE_EQ(device[i], flops[i]);
    EXPECT_DOUBLE_EQ(mfu[i], device[i] / 1e6);
  }
  EXPECT_NE(error_of([] { ThroughputMonitor(50, 0, 1e12); }).find("give both, or neither"), std::string::npos);
}

TEST(Callbacks, GradientAccumulationSchedulerChangesTheFactorByEpoch) {
  auto scheduler = std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 4}, {2, 1}});
  TinyModule module;
  Trainer trainer(quiet().max_epochs(3), {scheduler});
  trainer.fit(module, tiny_data(8, 2));  // 4 batches per epoch: 1 + 1 + 4 optimizer steps
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_EQ(scheduler->factor(1), 4);
  EXPECT_THROW(GradientAccumulationScheduler(std::map<int64_t, int64_t>{{0, 0}}), Error);
}

}  // namespace
}  // namespace arc
