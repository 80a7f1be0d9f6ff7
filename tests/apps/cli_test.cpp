// The `arc` tool, run as a user runs it.
#include "support/arc_tool.h"
#include "support/command.h"
#include "support/python.h"
#include "support/scratch.h"

#include <arc/core/trainer_options.h>
#include <arc/version.h>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

using arc::testing::arc;
using arc::testing::arc_in;
using arc::testing::result_of;
using arc::testing::write_config;

TEST(Cli, TrainPrintsTheResultLine) {
  const auto out =
      arc("train --set trainer.limit_train_batches=40 --set trainer.limit_val_batches=2 "
          "--set trainer.num_threads=1 --set trainer.enable_progress_bar=false");
  ASSERT_EQ(out.status, 0) << out.output;
  const auto result = result_of(out.output);
  ASSERT_TRUE(result.is_object()) << out.output;
  for (const char* field : {"train_time_s", "train_sps", "median_step_ms", "mean_step_ms", "t_first_step_s",
                            "train_loss_last100", "val_loss", "val_acc", "final_param_sha256", "world_size", "threads"})
    EXPECT_TRUE(result.contains(field)) << field;
  EXPECT_EQ(result["steps"], 40);
  EXPECT_EQ(result["threads"], 1);
  EXPECT_EQ(result["final_param_sha256"].get<std::string>().size(), 64u);
  EXPECT_GT(result["t_first_step_s"].get<double>(), 0.0);
}

// WORKLOAD.md's MLP after one epoch: 0.8673 in float32.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code missing;
  for (const auto& entry : fs::directory_iterator(dir, missing)) {
    const auto name = entry.path().filename().string();
    out.push_back(name.rfind("events.out.tfevents.", 0) == 0 ? "events.out.tfevents." : name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// As Lightning's logger=True and LightningCLI: metrics.csv, TensorBoard events, hparams.yaml and the
// resolved config.yaml in lightning_logs/version_N, a new version per run, checkpoints inside it.
TEST(Cli, FitLeavesMetricsHparamsAndConfigInANewVersionPerRun) {
  const auto dir = arc::testing::process_scratch() / "cli_logs";
  fs::remove_all(dir);
  const std::string args =
      " --set trainer.limit_train_batches=60 --set trainer.limit_val_batches=2 "
      "--set trainer.num_threads=1 --set trainer.enable_progress_bar=false";
  ASSERT_EQ(arc_in(dir, "fit" + args).status, 0);
  const auto version_0 = dir / "lightning_logs" / "version_0";
  EXPECT_EQ(names_in(version_0), (std::vector<std::string>{"checkpoints", "config.yaml", "events.out.tfevents.",
                                                           "hparams.yaml", "metrics.csv"}));
  std::ifstream csv(version_0 / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("epoch,step,", 0), 0u) << header;
  std::stringstream config;
  config << std::ifstream(version_0 / "config.yaml").rdbuf();
  for (const char* line : {"  name: \"mlp_classifier\"", "  limit_train_batches: 60", "  logger: true",
                           "  max_epochs: 1", "  precision: \"32-true\""})
    EXPECT_NE(config.str().find(line), std::string::npos) << line << " in\n" << config.str();
  ASSERT_EQ(arc_in(dir, "train" + args).status, 0) << "`train` is `fit`";
  EXPECT_TRUE(fs::exists(dir / "lightning_logs" / "version_1" / "metrics.csv"));
  EXPECT_TRUE(fs::exists(dir / "lightning_logs" / "version_1" / "checkpoints" / "last.ckpt"));
  // Resuming continues in the version of the checkpoint, as Lightning's does.
  ASSERT_EQ(arc_in(dir, "fit --resume last --set trainer.max_epochs=2" + args).status, 0);
  EXPECT_FALSE(fs::exists(dir / "lightning_logs" / "version_2" / "metrics.csv"));
  fs::remove_all(dir);
  ASSERT_EQ(arc_in(dir, "fit --set trainer.logger=false" + args).status, 0);
  EXPECT_FALSE(fs::exists(dir / "lightning_logs"));
  fs::remove_all(dir);
}

// Help comes from the table TrainerOptions::from_json reads, so it lists every key the parser takes.
// The version that CMake's project(VERSION) gives: the header's, the library's and the tool's agree.
TEST(Cli, VersionIsTheProjectsVersion) {
  const std::string version = std::to_string(ARC_VERSION_MAJOR) + "." + std::to_string(ARC_VERSION_MINOR) + "." +
                              std::to_string(ARC_VERSION_PATCH);
  EXPECT_EQ(version, ARC_VERSION_STRING);
  EXPECT_EQ(std::string(arc::version()), version);
  const auto out = arc("--version");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_EQ(out.output, "arc (Arclight) " + version + "\n");
}

TEST(Cli, FitHelpListsEveryTrainerKeyWithItsDefault) {
  const auto out = arc("fit --help");
  ASSERT_EQ(out.status, 0) << out.output;
  const auto defaults = arc::TrainerOptions().to_json();
  for (const auto& [key, value] : defaults.items())
    EXPECT_NE(out.output.find("trainer." + key + " = " + value.dump()), std::string::npos) << key << "\n" << out.output;
  for (const char* name : {"EarlyStopping", "ModelCheckpoint", "CSVLogger", "TensorBoardLogger"})
    EXPECT_NE(out.output.find(name), std::string::npos) << name;
}

// jsonargparse's --<key>.help <class>: the init_args a class reads, with their defaults, found by
// building it from a survey, so the list is the reader's own and goes on past a required key.
TEST(Cli, KeyHelpListsTheInitArgsOfAClassWithTheirDefaults) {
  auto out = arc("fit --trainer.callbacks.help EarlyStopping");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_EQ(out.output,
            "EarlyStopping (callback) init_args, with their defaults:\n"
            "  check_finite=true\n  check_on_train_epoch_end=null\n  divergence_threshold=null\n"
            "  log_rank_zero_only=false\n  min_delta=0.0\n  mode=\"min\"\n  monitor (required)\n  patience=3\n"
            "  stopping_threshold=null\n  strict=true\n  verbose=false\n"
            "Give them on the command line: --trainer.callbacks+=EarlyStopping --trainer.callbacks.<key>=<value>\n"
            "or in a config: {\"trainer\": {\"callbacks\": [{\"class_path\": \"EarlyStopping\", \"init_args\": "
            "{\"<key>\": <value>}}]}}\n");
  const std::vector<std::pair<std::string, std::string>> listed = {
      // Lightning's import path, the = form, and a logger's required save_dir among its keys.
      {"--trainer.logger.help=lightning.pytorch.loggers.CSVLogger",
       "CSVLogger (logger) init_args, with their defaults:\n  flush_logs_every_n_steps=100\n  "
       "name=\"lightning_logs\"\n  prefix=\"\"\n  save_dir (required)\n  version=-1\n"},
      // A scheduler's constructor refuses the survey's step_size 0; Lightning's interval, frequency
      // and monitor are read before it.
      {"--lr_scheduler.help StepLR",
       "  frequency=1\n  gamma=0.1\n  interval=\"epoch\"\n  monitor=\"\"\n  step_size (required)\n"},
      {"--optimizer.help torch.optim.SGD",
       "  dampening=0.0\n  lr (required)\n  momentum=0.0\n  nesterov=false\n  weight_decay=0.0\n"
       "Give them on the command line: --optimizer=SGD --optimizer.<key>=<value>\n"},
      {"--model.help mlp_classifier", "mlp_classifier (module) init_args, with their defaults:\n  hidden=256\n"},
      // Under a config of two devices it prints in the tool's process, starting no ranks.
      {"--trainer.devices=2 --data.help canonical", "canonical (data module) init_args, with their defaults:\n"},
      // Lightning's classes that stand for trainer options: one entry each, or a list of plugins.
      {"--trainer.strategy.help lightning.pytorch.strategies.DDPStrategy",
       "  start_method=\"popen\"\n  static_graph=null\n  timeout=null\n"
       "Give them on the command line: --trainer.strategy=DDPStrategy --trainer.strategy.<key>=<value>\n"
       "or in a config: {\"trainer\": {\"strategy\": {\"class_path\": \"DDPStrategy\", \"init_args\": "
       "{\"<key>\": <value>}}}}\n"},
      {"--trainer.profiler.help SimpleProfiler",
       "SimpleProfiler (profiler class) init_args, with their defaults:\n  dirpath=\"\"\n  extended=true\n"
       "  filename=\"\"\n"},
      {"--trainer.plugins.help SLURMEnvironment",
       "  auto_requeue=true\n  requeue_signal=\"SIGUSR1\"\n"
       "Give them on the command line: --trainer.plugins+=SLURMEnvironment --trainer.plugins.<key>=<value>\n"}};
  for (const auto& [flags, text] : listed) {
    out = arc("fit " + flags);
    EXPECT_EQ(out.status, 0) << flags;
    EXPECT_NE(out.output.find(text), std::string::npos) << out.output;
    // Printed once, by the tool: no rank started (each would print it again).
    EXPECT_EQ(arc::testing::occurrences(out.output, " init_args, with their defaults:\n"), 1) << out.output;
    EXPECT_EQ(out.output.find("rank"), std::string::npos) << out.output;
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--trainer.callbacks.help EarlyStoping",
       "--trainer.callbacks.help: unknown callback 'EarlyStoping'; did you mean 'EarlyStopping'?"},
      {"--trainer.logger.help",
       "--trainer.logger.help needs a class: --trainer.logger.help <class>, one of CSVLogger, JsonLinesLogger, "
       "TensorBoardLogger"},
      {"--trainer.max_epochs.help 3", "--trainer.max_epochs.help: 'trainer.max_epochs' names no class;"}};
  for (const auto& [flags, error] : refused) {
    out = arc("fit " + flags);
    EXPECT_EQ(out.status, 2) << flags;
    EXPECT_NE(out.output.find("arc: error: " + error), std::string::npos) << out.output;
  }
}

TEST(Cli, Bf16MixedMlpEpochIsWithinOnePointOfFloat32) {
  const auto out =
      arc("train --set trainer.precision=bf16-mixed --set trainer.num_threads=1 "
          "--set trainer.enable_progress_bar=false --set trainer.enable_checkpointing=false");
  ASSERT_EQ(out.status, 0) << out.output;
  const auto result = result_of(out.output);
  ASSERT_TRUE(result.is_object()) << out.output;
  EXPECT_NEAR(result["val_acc"].get<double>(), 0.8673, 0.01);
  EXPECT_NE(out.output.find("precision bf16-mixed: autocast to BFloat16 on cpu"), std::string::npos) << out.output;
}

TEST(Cli, ShippedDdpSpawnConfigTrainsOnTwoProcesses) {
  const auto out = arc(std::string("train --config ") + ARC_SOURCE_DIR + "/apps/configs/mlp_ddp_spawn.json" +
                       " --set trainer.limit_train_batches=120 --set trainer.enable_progress_bar=false");
  ASSERT_EQ(out.status, 0) << out.output;
  const auto result = result_of(out.output);
  EXPECT_EQ(result["world_size"], 2);
  EXPECT_EQ(result["steps"], 120);
  EXPECT_GT(result["val_acc"].get<double>(), 0.5);
  EXPECT_EQ(out.output.find("RESULT", out.output.find("RESULT") + 1), std::string::npos) << "only rank 0 reports";
}

// strategy left at "auto": two devices mean two processes started here, as Lightning's DDP.
TEST(Cli, TwoDevicesUnderAutoTrainOnTwoProcesses) {
  const auto out =
      arc("train --set trainer.devices=2 --set trainer.limit_train_batches=20 "
          "--set trainer.limit_val_batches=2 --set trainer.enable_progress_bar=false "
          "--set trainer.enable_checkpointing=false");
  ASSERT_EQ(out.status, 0) << out.output;
  const auto result = result_of(out.output);
  ASSERT_TRUE(result.is_object()) << out.output;
  EXPECT_EQ(result["world_size"], 2);
  EXPECT_EQ(result["steps"], 20);
}

// LightningCLI's dotted flags are --set overrides: the same run, on two processes under the tool.
TEST(Cli, LightningCliDottedFlagsAreOverrides) {
  const auto dotted =
      arc("fit --trainer.devices=2 --trainer.limit_train_batches 20 --trainer.limit_val_batches=2 "
          "--data.batch_size 32 --trainer.enable_progress_bar=false --trainer.enable_checkpointing false");
  const auto set =
      arc("fit --set trainer.devices=2 --set trainer.limit_train_batches=20 --set trainer.limit_val_batches=2 "
          "--set data.batch_size=32 --set trainer.enable_progress_bar=false --set trainer.enable_checkpointing=false");
  ASSERT_EQ(dotted.status, 0) << dotted.output;
  ASSERT_EQ(set.status, 0) << set.output;
  EXPECT_EQ(result_of(dotted.output)["world_size"], 2);
  EXPECT_EQ(result_of(dotted.output)["steps"], 20);
  EXPECT_EQ(result_of(dotted.output)["final_param_sha256"], result_of(set.output)["final_param_sha256"]);
  const auto missing = arc("fit --trainer.max_epochs");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("arc: error: --trainer.max_epochs needs a value: write --trainer.max_epochs=<value> "
                                "or --trainer.max_epochs <value>"),
            std::string::npos)
      << missing.output;
  // LightningCLI's --model.<key> sets the module's option.
  const std::string short_run = " --trainer.max_steps=5 --trainer.limit_val_batches=0 --trainer.logger=false";
  const auto model = arc("fit --model.lr 0.5" + short_run);
  const auto module = arc("fit --module.lr 0.5" + short_run);
  const auto default_lr = arc("fit" + short_run);
  ASSERT_EQ(model.status, 0) << model.output;
  EXPECT_EQ(result_of(model.output)["final_param_sha256"], result_of(module.output)["final_param_sha256"]);
  EXPECT_NE(result_of(model.output)["final_param_sha256"], result_of(default_lr.output)["final_param_sha256"]);
}

// Strategy fsdp trains the canonical MLP to ddp_spawn's bits, by name, as Lightning's FSDPStrategy
// with optimizer-state sharding, and with FULL_SHARD over the MLP's three layers (and sharded
// checkpoints).
TEST(Cli, FsdpTrainsTheMlpToTheBitsOfDdpSpawn) {
  const std::string common = " --set trainer.devices=2 --set trainer.enable_progress_bar=false";
  const auto ddp = arc("fit --set trainer.strategy=ddp_spawn" + common);
  const auto fsdp = arc("fit --set trainer.strategy=fsdp" + common);
  const auto zero =
      arc("fit --set 'trainer.strategy={\"class_path\": \"FSDPStrategy\", \"init_args\": {\"sharding_strategy\": "
          "\"SHARD_OPTIMIZER\"}}'" +
          common);
  // FULL_SHARD writes sharded checkpoints, which `arc consolidate` makes one file of and `arc export` reads.
  const auto dir = std::filesystem::temp_directory_path() / ("arc_cli_sharded_" + std::to_string(getpid()));
  const auto full = arc::testing::arc_in(dir,
                                         "fit --set trainer.strategy=fsdp --set trainer.sharding_strategy=FULL_SHARD "
                                         "--set trainer.state_dict_type=sharded" +
                                             common);
  const auto consolidated =
      arc::testing::arc_in(dir, "consolidate --ckpt lightning_logs/version_0/checkpoints/last.ckpt/");
  ASSERT_EQ(consolidated.status, 0) << full.output << consolidated.output;
  EXPECT_EQ(result_of(consolidated.output)["to"], "lightning_logs/version_0/checkpoints/last.consolidated.ckpt");
  const auto exported = arc::testing::arc_in(dir, "export --ckpt last --to model.safetensors");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(result_of(exported.output)["tensors"], 6);
  const auto from_file = arc::testing::arc_in(
      dir, "export --ckpt lightning_logs/version_0/checkpoints/last.consolidated.ckpt --to file.safetensors");
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  const auto bytes = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(dir / "model.safetensors"), bytes(dir / "file.safetensors"));
  std::filesystem::remove_all(dir);
  for (const auto* run : {&ddp, &fsdp, &zero, &full}) ASSERT_EQ(run->status, 0) << run->output;
  EXPECT_NE(full.output.find("fsdp: FULL_SHARD over 3 units"), std::string::npos) << full.output;
  EXPECT_EQ(result_of(full.output)["final_param_sha256"], result_of(ddp.output)["final_param_sha256"]);
  EXPECT_NE(fsdp.output.find("fsdp: sharding_strategy SHARD_GRAD_OP"), std::string::npos) << fsdp.output;
  EXPECT_NE(zero.output.find("fsdp: sharding_strategy SHARD_OPTIMIZER"), std::string::npos) << zero.output;
  EXPECT_EQ(result_of(fsdp.output)["world_size"], 2);
  EXPECT_EQ(result_of(fsdp.output)["final_param_sha256"], result_of(ddp.output)["final_param_sha256"]);
  EXPECT_EQ(result_of(zero.output)["final_param_sha256"], result_of(ddp.output)["final_param_sha256"]);
  // Weight averaging reads every parameter after each step, which FULL_SHARD's ranks do not hold.
  const auto averaged = arc("fit --set trainer.strategy=fsdp --set trainer.sharding_strategy=FULL_SHARD" + common +
                            " --trainer.callbacks+=EMAWeightAveraging");
  EXPECT_NE(averaged.status, 0);
  EXPECT_NE(averaged.output.find("weight averaging (EMA, SWA) reads every parameter"), std::string::npos)
      << averaged.output;
}

// LightningCLI's top-level seed_everything: an integer is trainer.seed; true a seed chosen for the
// run (ARC_GLOBAL_SEED when set), saved as the integer it was, so that the saved config repeats it.
TEST(Cli, SeedEverythingSeedsTheTrainerAndSavesTheSeedItChose) {
  const auto print = [](const std::string& prefix, const std::string& seed) {
    return arc::testing::run_command(prefix + ARC_BINARY + " fit --print_config --set seed_everything=" + seed);
  };
  const auto fixed = print("", "42");
  ASSERT_EQ(fixed.status, 0) << fixed.output;
  EXPECT_NE(fixed.output.find("seed_everything: 42\n"), std::string::npos) << fixed.output;
  EXPECT_NE(fixed.output.find("\n  seed: 42\n"), std::string::npos) << fixed.output;
  const auto inherited = print("ARC_GLOBAL_SEED=5 ", "true");
  EXPECT_NE(inherited.output.find("seed_everything: 5\n"), std::string::npos) << inherited.output;
  EXPECT_NE(inherited.output.find("\n  seed: 5\n"), std::string::npos) << inherited.output;
  const auto chosen = print("env -u ARC_GLOBAL_SEED ", "true");
  const auto at = chosen.output.find("seed_everything: ");
  ASSERT_NE(at, std::string::npos) << chosen.output;
  const std::string seed = chosen.output.substr(at + 17, chosen.output.find('\n', at) - at - 17);
  EXPECT_FALSE(seed.empty() || seed.find_first_not_of("0123456789") != std::string::npos) << chosen.output;
  EXPECT_NE(chosen.output.find("\n  seed: " + seed + "\n"), std::string::npos) << chosen.output;
  EXPECT_NE(print("", "false").output.find("\n  seed: null\n"), std::string::npos);
  // true takes the trainer's own seed when it has one.
  const auto own = print("", "true --set trainer.seed=9");
  EXPECT_NE(own.output.find("seed_everything: 9\n"), std::string::npos) << own.output;
  const auto disagree = arc("fit --set seed_everything=3 --set trainer.seed=4");
  EXPECT_EQ(disagree.status, 2) << disagree.output;
  EXPECT_NE(disagree.output.find("seed_everything (3) and trainer.seed (4) disagree; set only one of them"),
            std::string::npos)
      << disagree.output;
  const auto negative = arc("fit --set seed_everything=-1");
  EXPECT_EQ(negative.status, 2) << negative.output;
  EXPECT_NE(negative.output.find("'seed_everything' must be true, false or a non-negative integer, got -1"),
            std::string::npos)
      << negative.output;
}

// profiler=simple under ddp_spawn: each rank reports its own actions, the gradient all-reduce among them.
TEST(Cli, DdpSpawnProfileOfEachRankTimesTheGradientAllReduce) {
  const auto dir = arc::testing::process_scratch() / "cli_profile";
  fs::remove_all(dir);
  const auto run = arc_in(dir, "train --config " + arc::testing::shipped_config() +
                                   " --set trainer.profiler=simple --set trainer.limit_train_batches=10"
                                   " --set trainer.limit_val_batches=2 --set trainer.enable_progress_bar=false");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("fit profile ("), std::string::npos) << "rank 0 prints its table";
  for (const char* name : {"fit-profile.txt", "fit-profile-1.txt"}) {
    std::stringstream report;
    report << std::ifstream(dir / "lightning_logs" / "version_0" / name).rdbuf();
    for (const char* action : {"| [GradReducer].all_reduce ", "| [GradReducer].wait ",
                               "| [Strategy]ddp_spawn.backward ", "| run_training_batch "})
      EXPECT_NE(report.str().find(action), std::string::npos) << action << " in " << name << ":\n" << report.str();
  }
  fs::remove_all(dir);
}

TEST(Cli, ConfigFileAndOverridesBuildTheCnn) {
  const auto path = write_config("arc_cli_cnn.json", R"({"module": {"name": "cnn_classifier"},
    "data": {"batch_size": 32}, "trainer": {"max_steps": 3, "limit_val_batches": 0, "enable_progress_bar": false}})");
  const auto out = arc("train --config " + path + " --set trainer.max_steps=5 --set data.pin_memory=true");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_NE(out.output.find("Conv2d"), std::string::npos);
  EXPECT_EQ(result_of(out.output)["steps"], 5);
  // data.pin_memory reaches the loaders, which pin only where CUDA is.
  const bool warned = out.output.find("pin_memory is on, but no CUDA device is available") != std::string::npos;
  EXPECT_EQ(warned, !torch::cuda::is_available()) << out.output;
  std::filesystem::remove(path);
}

TEST(Cli, BadConfigKeysNameTheKeyAndSuggest) {
  auto out = arc("train --set trainer.max_epoch=2");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(out.output.find("unknown config key 'trainer.max_epoch'; did you mean 'max_epochs'?"), std::string::npos)
      << out.output;
  out = arc("train --set module.hiden=3");
  EXPECT_NE(out.output.find("'module.hiden'; did you mean 'hidden'?"), std::string::npos) << out.output;
  out = arc("train --set data.batch_size=-4");
  EXPECT_NE(out.output.find("data.batch_size must be >= 1, got -4"), std::string::npos) << out.output;
  out = arc("train --set module.name=mlp_clasifier");
  EXPECT_NE(out.output.find("unknown module 'mlp_clasifier'; did you mean 'mlp_classifier'?"), std::string::npos)
      << out.output;
  out = arc("train --set trainer.strategy=dpp");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(out.output.find("unknown strategy 'dpp'"), std::string::npos) << out.output;
  out = arc("train --set modell.name=x");
  EXPECT_NE(out.output.find("unknown config key 'modell'; did you mean 'model'? known top-level keys: ckpt_path, data, "
                            "lr_scheduler, model, module, optimizer, seed_everything, trainer, verbose"),
            std::string::npos)
      << out.output;
  out = arc("train --set trainer.default_root_dir=/proc/arc_absent");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(
      out.output.find("cannot create the log folder '/proc/arc_absent/lightning_logs': No such file or directory; "
                      "make its parent writable or give the logger another save_dir (the default loggers' is "
                      "default_root_dir)"),
      std::string::npos)
      << out.output;
}

// A mistyped subcommand or option is the tool's error as a bad config key is (exit status 2): the
// word, the nearest right one, and the right ones.
TEST(Cli, MistypedSubcommandsAndOptionsNameTheWordAndSuggest) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trian --set trainer.max_epochs=1",
       "arc: error: unknown subcommand 'trian'; did you mean 'train'? known: fit, train, validate, test, predict, "
       "lr_find, scale_batch_size, export, consolidate, modules"},
      {"", "arc: error: no subcommand given; the first argument is one of fit, train"},
      {"fit --confg run.json", "arc: error: arc fit: unknown option '--confg'; did you mean '--config'? known: --help"},
      {"validate --set trainer.limit_val_batches=1 --resume last",
       "arc validate: unknown option '--resume'; known: --help, -h, --config, -c, --set, -s, --print_config, --ckpt, "
       "--ckpt_path, --verbose"},
      {"fit run.json more.json",
       "arc fit: unexpected argument 'run.json', 'more.json'; it takes options only, such as --config FILE"},
      {"lr_find --min_lr abc", "arc lr_find: could not convert: --min_lr = abc (arc lr_find --help lists its options)"},
  };
  for (const auto& [args, error] : cases) {
    const auto out = arc(args);
    EXPECT_EQ(out.status, 2) << args << ": " << out.output;
    EXPECT_NE(out.output.find(error), std::string::npos) << args << ": " << out.output;
  }
  EXPECT_EQ(arc("fit --help").status, 0);
}

TEST(Cli, UnreadableOrInvalidConfigFilesAreErrors) {
  auto out = arc("train --config /nonexistent/run.json");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(out.output.find("cannot read config file '/nonexistent/run.json'"), std::string::npos) << out.output;
  const auto bad = write_config("arc_cli_bad.json", "{\"trainer\": ");
  out = arc("train --config " + bad);
  EXPECT_NE(out.output.find("is not valid JSON: parse error at line 1, column 13: "), std::string::npos) << out.output;
  std::filesystem::remove(bad);
  out = arc("train --set trainer");
  EXPECT_NE(out.output.find("--set needs key=value"), std::string::npos) << out.output;
}

TEST(Cli, ResumeLastContinuesExactlyAndEvaluationLoadsCheckpoints) {
  const auto root = arc::testing::process_scratch() / "cli_resume";
  std::filesystem::remove_all(root);
  const std::string common = " --set trainer.default_root_dir=" + root.string() +
                             " --set trainer.limit_val_batches=1 --set trainer.enable_progress_bar=false"
                             " --set trainer.num_threads=1 --set trainer.limit_train_batches=20";
  const auto straight = arc("train --set trainer.max_epochs=2" + common);
  ASSERT_EQ(straight.status, 0) << straight.output;
  const auto first = arc("train --set trainer.max_epochs=1" + common);
  ASSERT_EQ(first.status, 0) << first.output;
  const auto resumed = arc("train --resume last --set trainer.max_epochs=2" + common);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(result_of(resumed.output)["final_param_sha256"], result_of(straight.output)["final_param_sha256"]);
  EXPECT_EQ(result_of(straight.output)["steps"], 40);
  EXPECT_EQ(result_of(resumed.output)["steps"], 20) << "resuming must skip the first epoch";
  const auto validated = arc("validate --ckpt last" + common);
  ASSERT_EQ(validated.status, 0) << validated.output;
  EXPECT_TRUE(result_of(validated.output).contains("val_acc"));
  EXPECT_EQ(validated.output.find("untrained"), std::string::npos) << validated.output;
  // LightningCLI's --ckpt_path names the same checkpoints.
  const auto lightning_named = arc("validate --ckpt_path last" + common);
  ASSERT_EQ(lightning_named.status, 0) << lightning_named.output;
  EXPECT_EQ(result_of(lightning_named.output), result_of(validated.output));
  const auto resumed_again = arc("fit --ckpt_path=last --set trainer.max_epochs=3" + common);
  ASSERT_EQ(resumed_again.status, 0) << resumed_again.output;
  EXPECT_EQ(result_of(resumed_again.output)["steps"], 20) << "resumed after the second epoch";
  // "best" of an earlier run: the default ModelCheckpoint monitors nothing, so its best is its
  // newest file, the third epoch's, whose weights last.ckpt holds too.
  const auto best = arc("validate --ckpt best" + common);
  ASSERT_EQ(best.status, 0) << best.output;
  EXPECT_NE(best.output.find("/checkpoints/epoch=2-step=60.ckpt' (ckpt_path=\"best\")"), std::string::npos)
      << best.output;
  EXPECT_EQ(result_of(best.output), result_of(arc("validate --ckpt last" + common).output));
  const auto missing = arc("validate --ckpt " + root.string() + "/none.ckpt" + common);
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
  std::filesystem::remove_all(root);
}

// arc export writes the last checkpoint's module weights as safetensors, and module.init_weights
// loads them into a module built from the config: it validates as the checkpoint does.
TEST(Cli, ExportWritesTheCheckpointsWeightsThatInitWeightsLoads) {
  const auto root = arc::testing::process_scratch() / "cli_export";
  std::filesystem::remove_all(root);
  const std::string common = " --set trainer.default_root_dir=" + root.string() +
                             " --set trainer.limit_val_batches=2 --set trainer.enable_progress_bar=false"
                             " --set trainer.num_threads=1 --set trainer.limit_train_batches=10";
  const auto missing = arc("export --ckpt last --to " + root.string() + "/model.safetensors" + common);
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("arc export --ckpt last: no last.ckpt in"), std::string::npos) << missing.output;
  ASSERT_EQ(arc("fit" + common).status, 0);
  const auto weights = root.string() + "/model.safetensors";
  const auto exported = arc("export --ckpt last --to " + weights + common);
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(result_of(exported.output)["files"], nlohmann::json::array({weights}));
  EXPECT_GT(result_of(exported.output)["tensors"], 0);
  const auto from_checkpoint = arc("validate --ckpt last" + common);
  const auto from_weights = arc("validate --set module.init_weights=" + weights + common);
  ASSERT_EQ(from_weights.status, 0) << from_weights.output;
  EXPECT_NE(from_weights.output.find("module.init_weights '" + weights + "':\nloaded "), std::string::npos)
      << from_weights.output;
  for (const char* metric : {"val_loss", "val_acc"})
    EXPECT_EQ(result_of(from_weights.output)[metric], result_of(from_checkpoint.output)[metric]) << metric;
  // Names that do not match are an error that says which, before anything runs.
  const auto renamed = arc("validate --set 'module.init_weights={path: " + weights + ", add_prefix: net.}'" + common);
  EXPECT_EQ(renamed.status, 2);
  EXPECT_NE(renamed.output.find("cannot load weights '" + weights + "' into the module (nothing was changed)"),
            std::string::npos)
      << renamed.output;
  std::filesystem::remove_all(root);
}

// The exported weights are the trained ones, bit for bit, in the PyTorch twin of each canonical
// model (bench/python): loaded there (twin_from_weights.py) from safetensors by a reader written
// from the spec, from .pt by torch.load(weights_only=True), and from Lightning's .ckpt by
// Lightning's load_from_checkpoint where Lightning imports (else by torch.load), its parameters
// hash as Arclight's RESULT says, and it validates to the same accuracy (the loss is averaged in
// another order, so to within float32 rounding).
TEST(Cli, ExportedWeightsLoadIntoThePyTorchTwinBitForBit) {
  const auto python = arc::testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << arc::testing::kNoPythonWithTorch;
  const bool lightning = arc::testing::imports(python, "lightning");
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    const auto root = arc::testing::process_scratch() / ("cli_twin_" + model);
    std::filesystem::remove_all(root);
    const std::string common = " --set module.name=" + model +
                               "_classifier --set trainer.default_root_dir=" + root.string() +
                               " --set trainer.enable_progress_bar=false --set trainer.num_threads=1";
    const auto fit = arc("fit --set trainer.limit_train_batches=10" + common);
    ASSERT_EQ(fit.status, 0) << fit.output;
    for (const std::string suffix : {".safetensors", ".pt", ".ckpt"}) {
      SCOPED_TRACE(suffix);
      const auto weights = root.string() + "/" + model + suffix;
      ASSERT_EQ(arc("export --ckpt last --to " + weights + common).status, 0);
      const auto twin = arc::testing::run_command(python + " " + ARC_SOURCE_DIR + "/tests/apps/twin_from_weights.py " +
                                                  weights + " " + model + " 2>&1");
      ASSERT_EQ(twin.status, 0) << twin.output;
      const auto theirs = nlohmann::json::parse(twin.output), ours = result_of(fit.output);
      EXPECT_EQ(theirs["param_sha256"], ours["final_param_sha256"]);
      EXPECT_EQ(theirs["val_acc"], ours["val_acc"]);
      EXPECT_NEAR(theirs["val_loss"].get<double>(), ours["val_loss"].get<double>(), 1e-6);
      if (suffix != ".ckpt") continue;
      // Lightning built its module from the run's hyper-parameters; torch.load sees the run's step.
      EXPECT_EQ(theirs["loaded_by"], lightning ? "lightning" : "torch.load");
      if (lightning)
        EXPECT_EQ(theirs["hparams"].value("lr", 0.0), 0.05) << theirs["hparams"];
      else
        EXPECT_EQ(theirs["global_step"], 10);
    }
    std::filesystem::remove_all(root);
  }
}

// The other way: PyTorch trains the twin and torch.saves its state_dict; Arclight loads it (named
// as the twin's nn.Sequential names it, mapped by rename rules) and trains on, to the same bits
// as PyTorch training on from the same file.
TEST(Cli, PyTorchTrainedWeightsTrainOnInArclightBitForBit) {
  const auto python = arc::testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << arc::testing::kNoPythonWithTorch;
  const std::map<std::string, std::string> renames = {
      {"mlp", R"([["^0[.]", fc1.], ["^2[.]", fc2.], ["^4[.]", fc3.]])"},
      {"cnn", R"([["^1[.]", conv1.], ["^4[.]", conv2.], ["^8[.]", fc.]])"}};
  for (const auto& [model, rename] : renames) {
    SCOPED_TRACE(model);
    const auto root = arc::testing::process_scratch() / ("cli_from_torch_" + model);
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    const auto weights = root.string() + "/torch_trained.pt";
    const auto workload = python + " " + ARC_SOURCE_DIR + "/bench/python/torch_workload.py --model " + model;
    const auto trained = arc::testing::run_command("TORCH_THREADS=1 " + workload + " --steps 7 --save " + weights);
    ASSERT_EQ(trained.status, 0) << trained.output;
    const auto theirs =
        arc::testing::run_command("TORCH_THREADS=1 " + workload + " --steps 10 --init-weights " + weights);
    ASSERT_EQ(theirs.status, 0) << theirs.output;
    const auto ours =
        arc("fit --set module.name=" + model + "_classifier --set trainer.default_root_dir=" + root.string() +
            " --set trainer.enable_progress_bar=false --set trainer.num_threads=1" +
            " --set trainer.limit_train_batches=10 --set 'module.init_weights={path: " + weights +
            ", rename: " + rename + "}'");
    ASSERT_EQ(ours.status, 0) << ours.output;
    EXPECT_NE(ours.output.find("loaded 6: "), std::string::npos) << ours.output;
    EXPECT_EQ(result_of(ours.output)["final_param_sha256"], result_of(theirs.output)["final_param_sha256"]);
    EXPECT_EQ(result_of(ours.output)["val_acc"], result_of(theirs.output)["val_acc"]);
    std::filesystem::remove_all(root);
  }
}

// Weights reach ONNX through the PyTorch twin (docs/weights.md): exported from a checkpoint, loaded
// into the twin, torch.onnx.export, checked by onnx.checker, the twin's parameters its initializers.
TEST(Cli, ExportedWeightsReachOnnxThroughThePyTorchTwin) {
  const auto python = arc::testing::python_with_torch();
  if (python.empty()) GTEST_SKIP() << arc::testing::kNoPythonWithTorch;
  if (!arc::testing::imports(python, "onnx")) GTEST_SKIP() << "onnx does not import (Debian's python3-onnx)";
  const auto root = arc::testing::process_scratch() / "cli_onnx";
  std::filesystem::remove_all(root);
  const std::string common = " --set module.name=cnn_classifier --set trainer.default_root_dir=" + root.string() +
                             " --set trainer.enable_progress_bar=false --set trainer.limit_train_batches=5";
  ASSERT_EQ(arc("fit" + common).status, 0);
  ASSERT_EQ(arc("export --ckpt last --to " + root.string() + "/model.safetensors" + common).status, 0);
  const auto twin =
      arc::testing::run_command(python + " " + ARC_SOURCE_DIR + "/tests/apps/twin_from_weights.py " + root.string() +
                                "/model.safetensors cnn " + root.string() + "/model.onnx 2>/dev/null");
  ASSERT_EQ(twin.status, 0) << twin.output;
  EXPECT_EQ(nlohmann::json::parse(twin.output)["onnx_initializers_match"], true) << twin.output;
  EXPECT_GT(std::filesystem::file_size(root / "model.onnx"), 0u);
  std::filesystem::remove_all(root);
}

TEST(Cli, ValidateTestPredictAndModules) {
  auto out = arc("validate --set trainer.limit_val_batches=2 --set trainer.enable_progress_bar=false");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_TRUE(result_of(out.output).contains("val_acc"));
  EXPECT_NE(out.output.find("Validate metric"), std::string::npos) << "Lightning's table: " << out.output;
  // Under DDP only rank 0 prints the table, as Lightning, and says once that without --ckpt the
  // module (built fresh from the config) had untrained weights.
  out = arc("test --set trainer.limit_test_batches=1 --set trainer.strategy=ddp_spawn --set trainer.devices=2");
  EXPECT_TRUE(result_of(out.output).contains("test_loss")) << out.output;
  const auto table = out.output.find("Test metric");
  ASSERT_NE(table, std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("Test metric", table + 1), std::string::npos) << out.output;
  EXPECT_EQ(arc::testing::occurrences(out.output,
                                      "warning: arc test ran without --ckpt, so with the module's "
                                      "initial, untrained weights; give --ckpt last"),
            1)
      << out.output;
  // LightningCLI's verbose: --verbose or the config's top-level key; fit and predict have none.
  out = arc("validate --set trainer.limit_val_batches=1 --verbose false");
  EXPECT_TRUE(result_of(out.output).contains("val_acc")) << out.output;
  EXPECT_EQ(out.output.find("Validate metric"), std::string::npos) << out.output;
  out = arc("test --set trainer.limit_test_batches=1 --set verbose=false");
  EXPECT_TRUE(result_of(out.output).contains("test_loss")) << out.output;
  EXPECT_EQ(out.output.find("Test metric"), std::string::npos) << out.output;
  out = arc("fit --set verbose=false");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(out.output.find("arc: error: --set: config key 'verbose' (false) is validate's and test's"),
            std::string::npos)
      << out.output;
  out = arc("predict --set trainer.limit_predict_batches=2");
  EXPECT_EQ(result_of(out.output)["predictions"], 2000) << out.output;
  EXPECT_NE(out.output.find("info: the predictions were not saved (no PredictionWriter among the callbacks); to "
                            "write them to files, add --trainer.callbacks+=PredictionWriter "
                            "--trainer.callbacks.output_dir=<folder>"),
            std::string::npos)
      << out.output;
  out = arc("modules");
  EXPECT_NE(out.output.find("mlp_classifier  (data: canonical): hidden=256, lr=0.05, momentum=0.9"), std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("canonical: batch_size=64, num_workers=0, pin_memory=false, val_batch_size=1000"),
            std::string::npos)
      << out.output;
  EXPECT_NE(out.output.find("cnn_classifier"), std::string::npos);
  EXPECT_NE(out.output.find("optimizers (arc fit --optimizer.help <class> lists one's init_args):\n  Adagrad, Adam, "
                            "AdamW, RMSprop, SGD\n"),
            std::string::npos)
      << out.output;
  out = arc("--help");
  EXPECT_EQ(out.status, 0);
  EXPECT_NE(out.output.find("Examples:"), std::string::npos);
}

// `arc lr_find` and `arc scale_batch_size` tune the config's module and data in one process, even
// when the config trains with ddp_spawn on two.
TEST(Cli, LrFindAndScaleBatchSizeTuneTheConfigsModule) {
  const auto dir = arc::testing::process_scratch() / "cli_tune";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto csv = (dir / "lr.csv").string();
  const auto svg = (dir / "lr.svg").string();
  auto out = arc("lr_find --config " + arc::testing::shipped_config() +
                 " --num_training 30 --min_lr 1e-4 --max_lr 1 --csv " + csv + " --svg " + svg);
  ASSERT_EQ(out.status, 0) << out.output;
  auto result = result_of(out.output);
  ASSERT_TRUE(result["suggested_lr"].is_number()) << out.output;
  EXPECT_GE(result["suggested_lr"].get<double>(), 1e-4);
  EXPECT_LE(result["suggested_lr"].get<double>(), 1.0);
  const auto steps = result["steps"].get<int64_t>();
  EXPECT_GT(steps, 10);
  EXPECT_LE(steps, 30);
  std::ifstream rows(csv);
  std::string line;
  int64_t lines = 0;
  while (std::getline(rows, line)) ++lines;
  EXPECT_EQ(lines, steps + 1) << "a header and one row per step";
  std::stringstream plot;
  plot << std::ifstream(svg).rdbuf();
  EXPECT_NE(plot.str().find("suggested lr"), std::string::npos);
  const auto in_dir = arc_in(dir, "lr_find --num_training 5");
  ASSERT_EQ(in_dir.status, 0) << in_dir.output;
  EXPECT_FALSE(fs::exists(dir / "lightning_logs")) << "tuning leaves no log folder";
  // Three trials of 2, 4 and 8 samples all fit.
  out = arc("scale_batch_size --max_trials 3 --steps_per_trial 1 --set trainer.num_threads=1");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_EQ(result_of(out.output)["batch_size"], 8) << out.output;
  // No trial above max_val.
  out = arc("scale_batch_size --max_val 6 --steps_per_trial 1 --set trainer.num_threads=1");
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_EQ(result_of(out.output)["batch_size"], 6) << out.output;
  out = arc("scale_batch_size --mode binary");
  EXPECT_EQ(out.status, 2);
  EXPECT_NE(out.output.find("mode is \"binary\"; use \"power\" or \"binsearch\""), std::string::npos) << out.output;
  fs::remove_all(dir);
}

}  // namespace
