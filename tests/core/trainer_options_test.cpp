#include <arc/base/error.h>
#include <arc/core/trainer_options.h>
#include <arc/strategies/cluster/cluster_environment.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include <tuple>
#include <vector>

namespace arc {
namespace {

std::string error_of(const nlohmann::json& json) {
  try {
    TrainerOptions::from_json(json);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(TrainerOptions, JsonRoundTripKeepsEveryOption) {
  const nlohmann::json json = {{"max_epochs", 3},
                               {"max_steps", 100},
                               {"max_time", "00:01:30:00"},
                               {"limit_train_batches", 0.25},
                               {"limit_val_batches", 10},
                               {"val_check_interval", 0.5},
                               {"accumulate_grad_batches", 4},
                               {"gradient_clip_val", 1.5},
                               {"gradient_clip_algorithm", "value"},
                               {"deterministic", true},
                               {"benchmark", false},
                               {"seed", 42},
                               {"fast_dev_run", true},
                               {"devices", {0, 1}},
                               {"precision", "32"},
                               {"enable_progress_bar", false},
                               {"num_threads", 2}};
  const auto options = TrainerOptions::from_json(json);
  EXPECT_EQ(*options.max_epochs(), 3);
  EXPECT_DOUBLE_EQ(*options.max_time(), 5400.0);
  EXPECT_TRUE(options.limit_train_batches().is_fraction);
  EXPECT_FALSE(options.limit_val_batches().is_fraction);
  EXPECT_EQ(options.fast_dev_run(), 1);
  EXPECT_EQ(options.devices().indices, (std::vector<int64_t>{0, 1}));
  const auto again = TrainerOptions::from_json(options.to_json());
  EXPECT_EQ(again.to_json(), options.to_json());
}

// null is each option's default, as Lightning's None; an optional option keeps null as its own setting.
TEST(TrainerOptions, NullIsTheDefault) {
  nlohmann::json nulls = nlohmann::json::object();
  for (const auto& option : TrainerOptions::help())
    if (option.key != "check_val_every_n_epoch") nulls[option.key] = nullptr;
  EXPECT_EQ(TrainerOptions::from_json(nulls).to_json(), TrainerOptions().to_json());
  EXPECT_EQ(TrainerOptions::from_json({{"check_val_every_n_epoch", nullptr}, {"val_check_interval", 100}})
                .check_val_every_n_epoch(),
            std::nullopt);
}

TEST(TrainerOptions, MaxTimeAcceptsSecondsAndParts) {
  EXPECT_DOUBLE_EQ(*TrainerOptions::from_json({{"max_time", 90}}).max_time(), 90.0);
  EXPECT_DOUBLE_EQ(*TrainerOptions::from_json({{"max_time", {{"minutes", 2}, {"seconds", 5}}}}).max_time(), 125.0);
  EXPECT_NE(error_of({{"max_time", "soon"}}).find("max_time"), std::string::npos);
}

TEST(TrainerOptions, BatchAmountCountsAndFractions) {
  EXPECT_EQ(BatchAmount::fraction(0.25).of(10), 2);
  EXPECT_EQ(BatchAmount::fraction(1.0).of(10), 10);
  EXPECT_EQ(BatchAmount::count(3).of(10), 3);
  EXPECT_EQ(BatchAmount::count(30).of(10), 10);
}

// Lightning's forms of devices=: 2, -1, [0, 1], "auto", "2" (a count), "0,1" and "1," (indices).
TEST(TrainerOptions, DevicesTakeLightningsForms) {
  const auto count = [](const Devices& d) { return d.is_auto ? -100 : d.indices.empty() ? d.count : -200; };
  EXPECT_EQ(count(TrainerOptions().devices(2).devices()), 2);
  EXPECT_EQ(count(TrainerOptions().devices(-1).devices()), -1);
  EXPECT_TRUE(TrainerOptions().devices("auto").devices().is_auto);
  EXPECT_TRUE(TrainerOptions().devices().is_auto);
  EXPECT_EQ(TrainerOptions().devices({0, 1}).devices().indices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(TrainerOptions().devices(std::vector<int64_t>{3}).devices().indices, (std::vector<int64_t>{3}));
  EXPECT_EQ(count(TrainerOptions().devices("2").devices()), 2);
  EXPECT_EQ(count(TrainerOptions().devices(std::string("-1")).devices()), -1);
  EXPECT_EQ(TrainerOptions().devices("0,1").devices().indices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(TrainerOptions().devices("1,").devices().indices, (std::vector<int64_t>{1}));
  // The JSON key means the same.
  EXPECT_EQ(count(TrainerOptions::from_json({{"devices", "2"}}).devices()), 2);
  EXPECT_EQ(count(TrainerOptions::from_json({{"devices", 3}}).devices()), 3);
  EXPECT_EQ(TrainerOptions::from_json({{"devices", "0,2"}}).devices().indices, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(TrainerOptions::from_json({{"devices", {1}}}).devices().indices, (std::vector<int64_t>{1}));
  EXPECT_EQ(TrainerOptions::from_json({{"devices", "2"}}).to_json()["devices"], 2);
  EXPECT_NE(error_of({{"devices", "two"}}).find("config key 'trainer.devices' must be \"auto\", a count"),
            std::string::npos)
      << error_of({{"devices", "two"}});
  EXPECT_NE(error_of({{"devices", "0,x"}}).find("lists device indices"), std::string::npos);
  try {
    TrainerOptions().devices("all");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("devices must be \"auto\", a count (-1 = all)"), std::string::npos)
        << error.what();
  }
}

TEST(TrainerOptions, UnknownKeySuggestsTheClosest) {
  const auto message = error_of({{"max_epoch", 3}});
  EXPECT_NE(message.find("unknown config key 'trainer.max_epoch'; did you mean 'max_epochs'?"), std::string::npos)
      << message;
}

TEST(TrainerOptions, WrongTypesNameKeyAndValue) {
  EXPECT_NE(error_of({{"max_epochs", "three"}}).find("'trainer.max_epochs' must be an integer, got \"three\""),
            std::string::npos);
  EXPECT_NE(error_of({{"deterministic", 1}}).find("'trainer.deterministic' must be true, false or \"warn\", got 1"),
            std::string::npos);
  EXPECT_NE(error_of({{"deterministic", "warm"}}).find("must be true, false or \"warn\", got \"warm\""),
            std::string::npos);
  EXPECT_NE(error_of({{"limit_train_batches", "all"}}).find("fraction in [0.0, 1.0]"), std::string::npos);
  EXPECT_NE(error_of({{"devices", true}}).find("devices"), std::string::npos);
  EXPECT_NE(error_of({{"seed", -1}}).find("non-negative integer"), std::string::npos);
}

// Lightning's registered names that carry find_unused_parameters ("ddp_find_unused_parameters_true").
TEST(TrainerOptions, LightningsFindUnusedParametersStrategyNamesAreDdpWithTheFlag) {
  EXPECT_NO_THROW(TrainerOptions::from_json({{"strategy", "ddp_spawn_find_unused_parameters_true"}}));
  EXPECT_NO_THROW(TrainerOptions::from_json({{"strategy", "ddp_find_unused_parameters_false"}}));
  EXPECT_NE(error_of({{"strategy", "ddp_find_unused_parameters_false"}, {"find_unused_parameters", true}})
                .find("strategy \"ddp_find_unused_parameters_false\" turns find_unused_parameters off, but "
                      "find_unused_parameters=true; drop one of them"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", "dpp_find_unused_parameters_true"}}).find("'dpp'"), std::string::npos);
  EXPECT_EQ(cluster::parse_strategy_name("ddp_find_unused_parameters_true").name, "ddp");
  EXPECT_EQ(cluster::parse_strategy_name("ddp_find_unused_parameters_true").find_unused_parameters, true);
  EXPECT_EQ(cluster::parse_strategy_name("ddp_spawn").find_unused_parameters, std::nullopt);
}

TEST(TrainerOptions, ValCheckIntervalTakesADurationAsMaxTimeDoes) {
  const auto text = TrainerOptions::from_json({{"val_check_interval", "00:00:01:30"}});
  EXPECT_TRUE(text.val_check_interval().is_time);
  EXPECT_DOUBLE_EQ(text.val_check_interval().value, 90.0);
  const auto parts = TrainerOptions::from_json({{"val_check_interval", {{"minutes", 2}}}});
  EXPECT_DOUBLE_EQ(parts.val_check_interval().value, 120.0);
  const auto again = TrainerOptions::from_json(parts.to_json());
  EXPECT_TRUE(again.val_check_interval().is_time);
  EXPECT_DOUBLE_EQ(again.val_check_interval().value, 120.0);
  EXPECT_NE(error_of({{"limit_val_batches", "00:00:00:30"}}).find("fraction in [0.0, 1.0]"), std::string::npos);
  try {
    TrainerOptions().limit_val_batches(BatchAmount::duration(30)).validate();
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("limit_val_batches takes batches"), std::string::npos) << error.what();
  }
  EXPECT_NE(error_of({{"val_check_interval", "1:30"}}).find("must be seconds, \"DD:HH:MM:SS\""), std::string::npos);
}

TEST(TrainerOptions, ImpossibleValuesSayWhatIsAllowed) {
  EXPECT_NE(error_of({{"limit_val_batches", 1.5}}).find("must be <= 1.0"), std::string::npos);
  EXPECT_NE(error_of({{"accumulate_grad_batches", 0}}).find("accumulate_grad_batches must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of({{"max_epochs", -2}}).find("max_epochs must be >= 0"), std::string::npos);
  EXPECT_NE(error_of({{"log_every_n_steps", 0}}).find("log_every_n_steps must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({{"check_val_every_n_epoch", 0}}).find("check_val_every_n_epoch must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({{"check_val_every_n_epoch", nullptr}}).find("must then be a count"), std::string::npos);
  EXPECT_EQ(error_of({{"check_val_every_n_epoch", nullptr}, {"val_check_interval", 100}}), "");
  EXPECT_NE(error_of({{"num_sanity_val_steps", -5}}).find("num_sanity_val_steps"), std::string::npos);
  EXPECT_NE(error_of({{"gradient_clip_val", -1.0}}).find("gradient_clip_val must be >= 0"), std::string::npos);
  EXPECT_NE(error_of({{"val_check_interval", 0}}).find("val_check_interval must be > 0"), std::string::npos);
  EXPECT_NE(error_of({{"num_nodes", 0}}).find("num_nodes must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({{"devices", 0}}).find("devices must be"), std::string::npos);
  EXPECT_NE(error_of({{"num_threads", -1}}).find("num_threads must be >= 0"), std::string::npos);
}

TEST(TrainerOptions, UnknownChoicesListTheKnownOnes) {
  const auto accelerator = error_of({{"accelerator", "gpus"}});
  EXPECT_NE(accelerator.find("unknown accelerator 'gpus'; did you mean 'gpu'?"), std::string::npos) << accelerator;
  const auto clip = error_of({{"gradient_clip_algorithm", "nrm"}});
  EXPECT_NE(clip.find("did you mean 'norm'"), std::string::npos) << clip;
  const auto even = error_of({{"even_batches", "padd"}});
  EXPECT_NE(even.find("unknown even_batches 'padd'; did you mean 'pad'?"), std::string::npos) << even;
  EXPECT_EQ(TrainerOptions::from_json({{"even_batches", "drop"}}).even_batches(), "drop");
  const auto precision = error_of({{"precision", "8-true"}});
  EXPECT_NE(precision.find("known: 32-true"), std::string::npos) << precision;
  const auto requeue = error_of({{"requeue_signal", "USR1"}});
  EXPECT_NE(requeue.find("unknown requeue_signal 'USR1'"), std::string::npos) << requeue;
  EXPECT_NE(requeue.find("SIGUSR1"), std::string::npos) << requeue;
  const auto backend = error_of({{"process_group_backend", "mpi"}});
  EXPECT_NE(backend.find("unknown process_group_backend 'mpi'"), std::string::npos) << backend;
  EXPECT_NE(backend.find("auto, nccl, gloo"), std::string::npos) << backend;
  EXPECT_EQ(TrainerOptions::from_json({{"process_group_backend", "gloo"}}).ddp().process_group_backend(), "gloo");
}

TEST(TrainerOptions, FaultToleranceOptions) {
  const auto options = TrainerOptions::from_json({{"auto_requeue", false},
                                                  {"requeue_signal", "SIGUSR2"},
                                                  {"elastic_checkpoint_every_n_steps", 7},
                                                  {"elastic_checkpoint_every_seconds", 30.0}});
  EXPECT_FALSE(options.slurm().auto_requeue());
  EXPECT_EQ(options.slurm().requeue_signal(), "SIGUSR2");
  EXPECT_EQ(options.elastic_checkpoint_every_n_steps(), 7);
  EXPECT_EQ(TrainerOptions::from_json(options.to_json()).elastic_checkpoint_every_seconds(), 30.0);
  EXPECT_NE(error_of({{"elastic_checkpoint_every_n_steps", -1}}).find("elastic_checkpoint_every_n_steps must be >= 0"),
            std::string::npos);
}

// Lightning's barebones=True: what may cost speed is off, and turning it back on is an error, in
// C++ and in a config alike (where null is still the default).
TEST(TrainerOptions, BarebonesTurnsOffWhatCostsSpeedAndRefusesItBack) {
  const auto bare = TrainerOptions().barebones(true);
  EXPECT_FALSE(bare.enable_checkpointing() || bare.logger() || bare.enable_progress_bar() ||
               bare.enable_model_summary());
  EXPECT_EQ(bare.num_sanity_val_steps(), 0);
  EXPECT_NO_THROW(bare.validate());
  EXPECT_EQ(TrainerOptions::from_json({{"barebones", true}}).to_json(), bare.to_json());
  EXPECT_EQ(TrainerOptions::from_json(bare.to_json()).to_json(), bare.to_json());
  EXPECT_EQ(TrainerOptions::from_json({{"barebones", true}, {"enable_checkpointing", nullptr}, {"logger", nullptr}})
                .to_json(),
            bare.to_json());
  EXPECT_TRUE(TrainerOptions::from_json({{"barebones", false}}).enable_checkpointing());
  try {
    TrainerOptions(bare).enable_progress_bar(true).validate();
    FAIL() << "a progress bar under barebones was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("barebones=true and enable_progress_bar=true contradict each other"),
              std::string::npos)
        << error.what();
  }
  for (const auto& [key, value, named] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"enable_checkpointing", true, "enable_checkpointing=true"},
           {"logger", true, "logger=true"},
           {"enable_model_summary", true, "enable_model_summary=true"},
           {"num_sanity_val_steps", 2, "num_sanity_val_steps=2"},
           {"fast_dev_run", true, "fast_dev_run=1"},
           {"detect_anomaly", true, "detect_anomaly=true"},
           {"profiler", "simple", "profiler=\"simple\""}})
    EXPECT_NE(error_of({{"barebones", true}, {key, value}}).find("barebones=true and " + named), std::string::npos)
        << key;
}

// Lightning's trainer.plugins are the options they stand for; what has no counterpart, two plugins
// of one kind, or a plugin against the option itself is an error that names the entries.
TEST(TrainerOptions, PluginsAreTheOptionsTheyStandFor) {
  const auto slurm =
      TrainerOptions::from_json({{"plugins",
                                  {{{"class_path", "lightning.pytorch.plugins.environments.SLURMEnvironment"},
                                    {"init_args", {{"auto_requeue", false}, {"requeue_signal", "SIGUSR2"}}}},
                                   {{"class_path", "lightning.pytorch.plugins.precision.MixedPrecision"},
                                    {"init_args", {{"precision", "bf16-mixed"}, {"device", "cpu"}}}},
                                   "AsyncCheckpointIO",
                                   "TorchSyncBatchNorm"}}});
  EXPECT_EQ(slurm.cluster_environment(), "slurm");
  EXPECT_FALSE(slurm.slurm().auto_requeue());
  EXPECT_EQ(slurm.slurm().requeue_signal(), "SIGUSR2");
  EXPECT_EQ(slurm.precision(), "bf16-mixed");
  EXPECT_TRUE(slurm.async_checkpointing());
  EXPECT_TRUE(slurm.sync_batchnorm());
  EXPECT_EQ(TrainerOptions::from_json(slurm.to_json()).to_json(), slurm.to_json());
  EXPECT_TRUE(TrainerOptions::from_json({{"plugins", "SLURMEnvironment"}}).slurm().auto_requeue());
  const auto one = TrainerOptions::from_json(
      {{"plugins", {{"class_path", "LightningEnvironment"}}}, {"cluster_environment", "local"}});
  EXPECT_EQ(one.cluster_environment(), "local");
  EXPECT_EQ(TrainerOptions::from_json({{"plugins", {"DoublePrecision"}}}).precision(), "64-true");
  EXPECT_EQ(TrainerOptions::from_json({{"plugins", {"HalfPrecision"}}}).precision(), "16-true");
  EXPECT_EQ(TrainerOptions::from_json({{"plugins", {"TorchCheckpointIO"}}}).to_json(), TrainerOptions().to_json());
  EXPECT_EQ(TrainerOptions::from_json({{"plugins", nlohmann::json::array()}}).to_json(), TrainerOptions().to_json());

  EXPECT_NE(error_of({{"plugins", {"SLURMEnviroment"}}})
                .find("unknown plugin 'SLURMEnviroment'; did you mean "
                      "'SLURMEnvironment'?"),
            std::string::npos);
  EXPECT_NE(error_of({{"plugins", {"SLURMEnvironment", "LSFEnvironment"}}})
                .find("'trainer.plugins[0]' and 'trainer.plugins[1]' are both cluster environment plugins"),
            std::string::npos);
  EXPECT_NE(error_of({{"plugins", {"SLURMEnvironment"}}, {"cluster_environment", "lsf"}})
                .find("'trainer.cluster_environment' is \"lsf\", but the plugin SLURMEnvironment sets "
                      "cluster_environment to \"slurm\""),
            std::string::npos);
  EXPECT_NE(
      error_of({{"plugins", {"MixedPrecision"}}}).find("missing config key 'trainer.plugins[0].init_args.precision'"),
      std::string::npos);
  EXPECT_NE(error_of({{"plugins", {{{"class_path", "SLURMEnvironment"}, {"init_args", {{"auto_requeu", false}}}}}}})
                .find("did you mean 'auto_requeue'"),
            std::string::npos);
  EXPECT_NE(error_of({{"plugins", {{{"class_path", "MixedPrecision"}, {"init_args", {{"precision", "8-mixed"}}}}}}})
                .find("trainer.plugins[0].init_args.precision (MixedPrecision): unknown precision '8-mixed'; did "
                      "you mean '16-mixed'?"),
            std::string::npos);
  EXPECT_NE(error_of({{"plugins", 3}}).find("'trainer.plugins' must be a list"), std::string::npos);
}

// Lightning's strategy classes, as LightningCLI configs give them, are the options they stand for;
// options the trainer section sets otherwise itself, init_args that take objects, and Lightning's
// strategies without a counterpart are errors that name the entry.
TEST(TrainerOptions, LightningsStrategyClassesAreTheOptionsTheyStandFor) {
  const auto ddp = TrainerOptions::from_json({{"accelerator", "auto"},
                                              {"strategy",
                                               {{"class_path", "lightning.pytorch.strategies.DDPStrategy"},
                                                {"init_args",
                                                 {{"find_unused_parameters", true},
                                                  {"static_graph", true},
                                                  {"gradient_as_bucket_view", false},
                                                  {"bucket_cap_mb", 4},
                                                  {"process_group_backend", "gloo"},
                                                  {"timeout", "0:05:30"},
                                                  {"broadcast_buffers", false},
                                                  {"accelerator", nullptr}}}}},
                                              {"static_graph", true}});
  EXPECT_EQ(ddp.strategy(), "auto");  // ddp under a launcher, ddp_spawn without one
  EXPECT_TRUE(ddp.ddp().find_unused_parameters());
  EXPECT_TRUE(ddp.ddp().static_graph());
  EXPECT_FALSE(ddp.ddp().gradient_as_bucket_view());
  EXPECT_EQ(ddp.ddp().bucket_cap_mb(), 4);
  EXPECT_EQ(ddp.ddp().process_group_backend(), "gloo");
  EXPECT_EQ(ddp.ddp().timeout(), 330);
  EXPECT_EQ(ddp.accelerator(), "auto");
  EXPECT_EQ(TrainerOptions::from_json(ddp.to_json()).to_json(), ddp.to_json());
  // Written back as the DDP settings' home: the strategy's entry, with what differs from the defaults.
  EXPECT_EQ(ddp.to_json()["strategy"], nlohmann::json::parse(R"({"class_path": "DDPStrategy", "init_args": {
      "find_unused_parameters": true, "static_graph": true, "gradient_as_bucket_view": false,
      "bucket_cap_mb": 4.0, "process_group_backend": "gloo", "timeout": 330.0}})"));
  EXPECT_FALSE(ddp.to_json().contains("static_graph"));

  // The class alone, start methods that always start the ranks from the Trainer, timeouts in other forms.
  EXPECT_EQ(TrainerOptions::from_json({{"strategy", "DDPStrategy"}}).strategy(), "auto");
  // static_graph from the class alone (above, the trainer section said it too).
  EXPECT_TRUE(TrainerOptions::from_json({{"strategy", {{"class_path", "DDPStrategy"}, {"static_graph", true}}}})
                  .ddp()
                  .static_graph());
  for (const char* method : {"spawn", "fork", "forkserver"})
    EXPECT_EQ(
        TrainerOptions::from_json({{"strategy", {{"class_path", "DDPStrategy"}, {"start_method", method}}}}).strategy(),
        "ddp_spawn")
        << method;
  EXPECT_EQ(TrainerOptions::from_json({{"strategy", {{"class_path", "DDPStrategy"}, {"timeout", 90}}}}).ddp().timeout(),
            90);
  // Arclight's own DDP settings are the DDP strategy's init_args too.
  const auto own = TrainerOptions::from_json(
      {{"strategy",
        {{"class_path", "DDPStrategy"},
         {"init_args", {{"collective_timeout", 20}, {"first_bucket_mb", 2}, {"shared_memory", false}}}}}});
  EXPECT_EQ(own.ddp().collective_timeout(), 20);
  EXPECT_EQ(own.ddp().first_bucket_mb(), 2);
  EXPECT_FALSE(own.ddp().shared_memory());
  EXPECT_EQ(TrainerOptions::from_json(own.to_json()).to_json(), own.to_json());
  EXPECT_EQ(TrainerOptions::from_json(
                {{"strategy", {{"class_path", "DDPStrategy"}, {"init_args", {{"timeout", {{"minutes", 2}}}}}}}})
                .ddp()
                .timeout(),
            120);
  const auto cpu = TrainerOptions::from_json({{"strategy", "SingleDeviceStrategy"}, {"devices", "auto"}});
  EXPECT_EQ(cpu.strategy(), "single_device");
  EXPECT_EQ(cpu.accelerator(), "cpu");
  const auto gpu =
      TrainerOptions::from_json({{"strategy", {{"class_path", "SingleDeviceStrategy"}, {"device", "cuda:1"}}}});
  EXPECT_EQ(gpu.accelerator(), "gpu");
  EXPECT_EQ(gpu.devices().to_json(), nlohmann::json::array({1}));

  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"find_unused_parameters", true}}},
                      {"find_unused_parameters", false}})
                .find("config key 'trainer.find_unused_parameters' is false, but trainer.strategy sets "
                      "find_unused_parameters to true; drop one of them"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"init_args", {{"find_unused_parameter", true}}}}}})
                .find("unknown config key 'trainer.strategy.init_args.find_unused_parameter'; did you mean "
                      "'find_unused_parameters'?"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"start_method", "popn"}}}})
                .find("unknown start_method 'popn'; did you mean 'popen'?"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"broadcast_buffers", true}}}})
                .find("broadcast_buffers=true is not taken here"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"cluster_environment", "SLURMEnvironment"}}}})
                .find("trainer.strategy.init_args.cluster_environment (DDPStrategy): DDPStrategy's "
                      "cluster_environment=\"SLURMEnvironment\" is not taken here: set trainer.cluster_environment "
                      "or name it in trainer.plugins"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DDPStrategy"}, {"timeout", "half an hour"}}}})
                .find("'trainer.strategy.init_args.timeout' must be seconds"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", "lightning.pytorch.strategies.DeepSpeedStrategy"}})
                .find("Lightning's DeepSpeedStrategy has no counterpart in Arclight"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "FSDPStrategy"}, {"state_dict_type", "local"}}}})
                .find("state_dict_type"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "FSDPStrategy"}, {"sharding_strategy", "SHARD_GRADS"}}}})
                .find("sharding_strategy"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "DPPStrategy"}}}})
                .find("unknown strategy class 'DPPStrategy'; did you mean 'DDPStrategy'?"),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "SingleDeviceStrategy"}, {"device", "mps"}}}})
                .find("SingleDeviceStrategy's device must be \"cpu\", \"cuda\", \"cuda:N\" or N, got \"mps\""),
            std::string::npos);
  EXPECT_NE(error_of({{"strategy", {{"class_path", "SingleDeviceStrategy"}, {"device", 1}}}, {"devices", 2}})
                .find("'trainer.devices' is 2, but trainer.strategy sets devices to [1]"),
            std::string::npos);
}

// The DDP and SLURM settings' flat keys are aliases: they still set the options, with a warning
// each that names the spelling in their home's entry; configs are written in that spelling, which any
// strategy's name takes as a class_path, and which reads back to the same options.
TEST(TrainerOptions, FlatDdpAndSlurmKeysAreAliasesThatWarn) {
  ::testing::internal::CaptureStderr();
  const auto flat = TrainerOptions::from_json(
      {{"strategy", "ddp_spawn"}, {"timeout", 60}, {"shared_memory", false}, {"auto_requeue", false}});
  const auto warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(flat.ddp().timeout(), 60);
  EXPECT_FALSE(flat.ddp().shared_memory());
  EXPECT_FALSE(flat.slurm().auto_requeue());
  EXPECT_NE(warnings.find("config key 'trainer.timeout' is an alias that still works; write it in the strategy's "
                          "init_args: trainer.strategy: {\"class_path\":\"ddp_spawn\",\"init_args\":{\"timeout\":60}}"),
            std::string::npos)
      << warnings;
  EXPECT_NE(
      warnings.find("'trainer.auto_requeue' is an alias that still works; write it in the init_args of the "
                    "SLURMEnvironment plugin: trainer.plugins: [{\"class_path\":\"SLURMEnvironment\",\"init_args\":"
                    "{\"auto_requeue\":false}}] (which also sets cluster_environment to slurm)"),
      std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("'trainer.shared_memory' is an alias"), std::string::npos) << warnings;
  size_t timeout_warnings = 0;
  for (size_t at = warnings.find("'trainer.timeout'"); at != std::string::npos;
       at = warnings.find("'trainer.timeout'", at + 1))
    ++timeout_warnings;
  EXPECT_EQ(timeout_warnings, 1u) << warnings;
  // Every rank reads the config; the first of the launch alone says so.
  ::setenv("RANK", "1", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(TrainerOptions::from_json({{"timeout", 60}}).ddp().timeout(), 60);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::unsetenv("RANK");

  // Written in the homes' spelling: the strategy's name as the class_path; SLURM's settings as the
  // SLURMEnvironment plugin where cluster_environment is slurm, else under their own keys.
  const auto written = flat.to_json();
  EXPECT_EQ(written["strategy"], nlohmann::json::parse(R"({"class_path": "ddp_spawn",
      "init_args": {"timeout": 60.0, "shared_memory": false}})"));
  EXPECT_FALSE(written.contains("timeout"));
  EXPECT_EQ(written["auto_requeue"], false);
  EXPECT_EQ(TrainerOptions::from_json(written).to_json(), written);
  auto slurm = flat;
  slurm.cluster_environment("slurm");
  EXPECT_EQ(slurm.to_json()["plugins"], nlohmann::json::parse(R"([{"class_path": "SLURMEnvironment",
      "init_args": {"auto_requeue": false}}])"));
  EXPECT_FALSE(slurm.to_json().contains("auto_requeue"));
  EXPECT_EQ(TrainerOptions::from_json(slurm.to_json()).to_json(), slurm.to_json());
  EXPECT_EQ(TrainerOptions().to_json()["strategy"], "auto");
  EXPECT_FALSE(TrainerOptions().to_json().contains("timeout"));

  // Every strategy's name takes the DDP settings as init_args.
  for (const char* name : {"ddp", "elastic", "single_device", "auto", "ddp_find_unused_parameters_true"}) {
    const auto named =
        TrainerOptions::from_json({{"strategy", {{"class_path", name}, {"init_args", {{"collective_timeout", 20}}}}}});
    EXPECT_EQ(named.strategy(), name);
    EXPECT_EQ(named.ddp().collective_timeout(), 20);
  }
  EXPECT_NE(error_of({{"strategy", {{"class_path", "ddp_spwan"}}}}).find("did you mean 'ddp_spawn'?"),
            std::string::npos);
}

}  // namespace
}  // namespace arc
