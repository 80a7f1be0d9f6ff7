// Config-driven runs as LightningCLI's: callbacks and loggers from the config, YAML and JSON, several
// files merged, --print_config, and errors that name the file and the key.
#include "support/arc_tool.h"
#include "support/python.h"
#include "support/scratch.h"
#include "support/terminal.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using arc::testing::arc;
using arc::testing::arc_in;
using arc::testing::fresh_folder;
using arc::testing::result_of;
using arc::testing::write_config;

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  std::error_code missing;
  for (const auto& entry : fs::directory_iterator(dir, missing)) out.insert(entry.path().filename().string());
  return out;
}

// Two ranks; four validations in the first epoch; EarlyStopping gives up after the third (no change
// of 1.0 in val_loss), ModelCheckpoint keeps the two best of the three by val_acc (written in the
// background), and the CSVLogger writes where its init_args say.
std::string yaml_run(const std::string& dir) {
  return "trainer:\n"
         "  strategy: ddp_spawn\n"
         "  devices: 2\n"
         "  max_epochs: 3\n"
         "  limit_train_batches: 40\n"
         "  limit_val_batches: 4\n"
         "  val_check_interval: 0.25\n"
         "  num_threads: 1\n"
         "  enable_progress_bar: false\n"
         "  log_every_n_steps: 1\n"
         "  callbacks:\n"
         "    - class_path: LearningRateMonitor\n"
         "      init_args: {logging_interval: step}\n"
         "    - class_path: EarlyStopping\n"
         "      init_args: {monitor: val_loss, patience: 2, min_delta: 1.0}\n"
         "    - class_path: ModelCheckpoint\n"
         "      init_args:\n"
         "        monitor: val_acc\n"
         "        mode: max\n"
         "        save_top_k: 2\n"
         "        async_checkpointing: true\n"
         "        dirpath: " +
         dir +
         "/best\n"
         "  logger:\n"
         "    - class_path: CSVLogger\n"
         "      init_args: {save_dir: " +
         dir +
         "/logs}\n"
         "module:\n"
         "  lr: 5e-2\n"
         "optimizer:\n"
         "  class_path: Adam\n"
         "  init_args: {lr: 1e-3, betas: [0.9, 0.99]}\n"
         "lr_scheduler: {class_path: CosineAnnealingLR, init_args: {T_max: 3, interval: step}}\n";
}

// The same run as JSON, whose strategy is Lightning's DDPStrategy: with its default start method
// and no launcher around, the Trainer starts the ranks (ddp_spawn).
std::string json_run(const std::string& dir) {
  return R"({"trainer": {"strategy": {"class_path": "lightning.pytorch.strategies.DDPStrategy",
                          "init_args": {"find_unused_parameters": false, "timeout": "0:30:00"}},
             "devices": 2, "max_epochs": 3, "limit_train_batches": 40,
             "limit_val_batches": 4, "val_check_interval": 0.25, "num_threads": 1, "enable_progress_bar": false,
             "log_every_n_steps": 1,
             "callbacks": [{"class_path": "LearningRateMonitor", "init_args": {"logging_interval": "step"}},
                           {"class_path": "EarlyStopping",
                            "init_args": {"monitor": "val_loss", "patience": 2, "min_delta": 1.0}},
                           {"class_path": "ModelCheckpoint",
                            "init_args": {"monitor": "val_acc", "mode": "max", "save_top_k": 2,
                                          "async_checkpointing": true, "dirpath": ")" +
         dir + R"(/best"}}],
             "logger": [{"class_path": "CSVLogger", "init_args": {"save_dir": ")" +
         dir + R"(/logs"}}]},
             "module": {"lr": 0.05},
             "optimizer": {"class_path": "Adam", "init_args": {"lr": 0.001, "betas": [0.9, 0.99]}},
             "lr_scheduler": {"class_path": "CosineAnnealingLR", "init_args": {"T_max": 3, "interval": "step"}}})";
}

// The values in column `name` of a metrics.csv, top to bottom, where the row has one.
std::vector<double> column(const std::string& csv_path, const std::string& name) {
  std::ifstream csv(csv_path);
  std::string line;
  std::getline(csv, line);
  std::vector<std::string> header;
  std::stringstream names(line);
  for (std::string cell; std::getline(names, cell, ',');) header.push_back(cell);
  const auto at = std::find(header.begin(), header.end(), name) - header.begin();
  std::vector<double> out;
  while (std::getline(csv, line)) {
    std::stringstream cells(line);
    std::string cell;
    for (long i = 0; i <= at && std::getline(cells, cell, ','); ++i)
      if (i == at && !cell.empty()) out.push_back(std::stod(cell));
  }
  return out;
}

// An error is put down to the file or flag that set the key it names: a dotted key wherever it
// stands, a top-level key where it opens the message or stands quoted, not where the word is prose.
TEST(Config, ErrorsNameTheSourceOfTheKeyTheyAreAbout) {
  const auto file = write_config("source.yaml", "trainer:\n  max_epochs: 2\n");
  const auto loaded = arc::cli::load_config({file}, {"model=cnn_classifier", "data.batch_size=0"});
  EXPECT_EQ(loaded.locate("data.batch_size must be >= 1, got 0"), "--set: data.batch_size must be >= 1, got 0");
  EXPECT_EQ(loaded.locate("config key 'trainer.max_epochs' must be an integer"),
            file + ": config key 'trainer.max_epochs' must be an integer");
  EXPECT_EQ(loaded.locate("model (cnn_clasifier): unknown module"), "--set: model (cnn_clasifier): unknown module");
  EXPECT_EQ(loaded.locate("the config has both 'module' and 'model'"),
            "--set: the config has both 'module' and 'model'");
  EXPECT_EQ(loaded.locate("missing config key 'model.init_args.x'; add it to the config"),
            "--set: missing config key 'model.init_args.x'; give it on the command line: --model.x=<value>");
  const std::string prose = "checkpoint 'a.ckpt' does not match CnnClassifier. It was written for another model";
  EXPECT_EQ(loaded.locate(prose), prose);
  EXPECT_EQ(loaded.locate("models differ"), "models differ");
}

TEST(Config, YamlCallbacksAndLoggerRunUnderDdpSpawnAndMatchTheJsonConfig) {
  const auto yaml_dir = fresh_folder("yaml");
  const auto yaml = arc_in(yaml_dir, "fit --config " + write_config("run.yaml", yaml_run(yaml_dir)));
  ASSERT_EQ(yaml.status, 0) << yaml.output;
  const auto result = result_of(yaml.output);
  EXPECT_EQ(result["world_size"], 2);
  EXPECT_GE(result["steps"].get<int>(), 30) << "three validations ran";
  EXPECT_LT(result["steps"].get<int>(), 40) << "EarlyStopping stopped fit within the first epoch";
  EXPECT_EQ(files_in(yaml_dir + "/best").size(), 2u) << "the two best of three";
  // CosineAnnealingLR over T_max = 3 steps from Adam's 1e-3: 1e-3, 7.5e-4, 2.5e-4, 0, then up again.
  const auto lr = column(yaml_dir + "/logs/lightning_logs/version_0/metrics.csv", "lr-Adam");
  ASSERT_GE(lr.size(), 5u);
  const std::vector<double> cosine = {1e-3, 7.5e-4, 2.5e-4, 0.0, 2.5e-4};
  for (size_t step = 0; step < cosine.size(); ++step) EXPECT_NEAR(lr[step], cosine[step], 1e-9) << "step " << step;
  EXPECT_FALSE(fs::exists(yaml_dir + "/lightning_logs")) << "the config's logger replaces the default";

  const auto json_dir = fresh_folder("json");
  const auto json = arc_in(json_dir, "fit --config " + write_config("run.json", json_run(json_dir)));
  ASSERT_EQ(json.status, 0) << json.output;
  EXPECT_EQ(result_of(json.output)["final_param_sha256"], result["final_param_sha256"]);
  EXPECT_EQ(result_of(json.output)["steps"], result["steps"]);
  fs::remove_all(yaml_dir);
  fs::remove_all(json_dir);
}

// LightningCLI's other spellings name the same classes: a class_path by its import path, one entry
// instead of a list, and a class_path alone as a string.
TEST(Config, LightningImportPathsLoneEntriesAndBareClassPathsNameTheSameClasses) {
  const auto dir = fresh_folder("spellings");
  const auto run = [&](const std::string& name, const std::string& trainer, const std::string& optimizer) {
    const std::string common =
        "trainer:\n  limit_train_batches: 20\n  limit_val_batches: 2\n  num_threads: 1\n"
        "  enable_progress_bar: false\n  log_every_n_steps: 1\n";
    return arc_in(dir, "fit --config " + write_config(name, common + trainer + "optimizer: " + optimizer + "\n"));
  };
  const auto short_names =
      run("short.yaml",
          "  callbacks:\n    - {class_path: LearningRateMonitor, init_args: {logging_interval: step}}\n"
          "  logger:\n    - {class_path: CSVLogger, init_args: {save_dir: " +
              dir + "/short}}\n",
          "{class_path: AdamW, init_args: {lr: 1e-2}}");
  const auto import_paths = run("import.yaml",
                                "  callbacks: {class_path: lightning.pytorch.callbacks.LearningRateMonitor, "
                                "init_args: {logging_interval: step}}\n"
                                "  logger: {class_path: lightning.pytorch.loggers.CSVLogger, init_args: {save_dir: " +
                                    dir + "/import}}\n",
                                "{class_path: torch.optim.AdamW, init_args: {lr: 1e-2}}");
  ASSERT_EQ(short_names.status, 0) << short_names.output;
  ASSERT_EQ(import_paths.status, 0) << import_paths.output;
  EXPECT_EQ(result_of(import_paths.output)["final_param_sha256"], result_of(short_names.output)["final_param_sha256"]);
  const auto lr = column(dir + "/import/lightning_logs/version_0/metrics.csv", "lr-AdamW");
  EXPECT_EQ(lr.size(), 20u);
  EXPECT_EQ(lr, column(dir + "/short/lightning_logs/version_0/metrics.csv", "lr-AdamW"));
  // Bare class paths: AdamW's default rate, the monitor's default interval (Lightning's None: an
  // optimizer without a scheduler at the epoch's start and at each of the 20 logged batches).
  const auto bare =
      run("bare.yaml", "  callbacks: [lightning.pytorch.callbacks.LearningRateMonitor]\n", "torch.optim.AdamW");
  ASSERT_EQ(bare.status, 0) << bare.output;
  EXPECT_EQ(column(dir + "/lightning_logs/version_0/metrics.csv", "lr-AdamW"), std::vector<double>(21, 1e-3));
  fs::remove_all(dir);
}

// What `arc fit` prints for the config `content`, written to `name`, which must fail as a bad config.
std::string error_for(const std::string& name, const std::string& content) {
  const auto run = arc("fit --config " + write_config(name, content));
  EXPECT_EQ(run.status, 2) << run.output;
  return run.output;
}

void expect_in(const std::string& output, const std::string& text) {
  EXPECT_NE(output.find(text), std::string::npos) << "'" << text << "' in:\n" << output;
}

// LightningCLI's callbacks on the command line: --trainer.callbacks+=<class> appends an entry, and the
// keys after it (--trainer.callbacks.<key>) are that entry's init_args. The same run as the config
// file's list: EarlyStopping ends it after the second epoch (no change of 1.0 in val_loss), and the
// monitor logs every step's rate.
TEST(Config, LightningCliAppendedCallbacksAreTheConfigFilesList) {
  const auto dir = fresh_folder("append");
  const std::string limits =
      " --trainer.max_epochs=3 --trainer.limit_train_batches=10 --trainer.limit_val_batches=2 "
      "--trainer.num_threads=1 --trainer.enable_progress_bar=false --trainer.log_every_n_steps=1";
  const auto listed = arc_in(
      dir, "fit" + limits + " --config " +
               write_config("listed.yaml",
                            "trainer:\n  logger: {class_path: CSVLogger, init_args: {save_dir: " + dir +
                                "/listed}}\n  callbacks:\n"
                                "    - {class_path: EarlyStopping, init_args: {monitor: val_loss, patience: 0, "
                                "min_delta: 1.0}}\n"
                                "    - {class_path: LearningRateMonitor, init_args: {logging_interval: step}}\n"));
  const std::string appended_flags =
      " --trainer.callbacks+=EarlyStopping --trainer.callbacks.monitor=val_loss --trainer.callbacks.patience 0"
      " --trainer.callbacks.min_delta=1.0 --trainer.callbacks+=lightning.pytorch.callbacks.LearningRateMonitor"
      " --trainer.callbacks.logging_interval=step --trainer.logger=CSVLogger --trainer.logger.save_dir=" +
      dir + "/appended";
  const auto appended = arc_in(dir, "fit" + limits + appended_flags);
  ASSERT_EQ(listed.status, 0) << listed.output;
  ASSERT_EQ(appended.status, 0) << appended.output;
  EXPECT_EQ(result_of(appended.output)["final_param_sha256"], result_of(listed.output)["final_param_sha256"]);
  EXPECT_EQ(result_of(appended.output)["steps"], 20) << "EarlyStopping ends the run after 2 of its 3 epochs";
  const auto rates = column(dir + "/appended/lightning_logs/version_0/metrics.csv", "lr-SGD");
  EXPECT_EQ(rates.size(), 20u);
  EXPECT_EQ(rates, column(dir + "/listed/lightning_logs/version_0/metrics.csv", "lr-SGD"));
  // Appended to a config file's list, after its entries; a key goes to the last entry.
  const auto printed = arc_in(dir, "fit --print_config --config " +
                                       write_config("one.yaml", "trainer:\n  callbacks: [EarlyStopping]\n") +
                                       " --trainer.callbacks.monitor=val_acc --trainer.callbacks+=Timer 2>/dev/null");
  ASSERT_EQ(printed.status, 0) << printed.output;
  const auto early = printed.output.find("class_path: \"EarlyStopping\"");
  const auto monitor = printed.output.find("monitor: \"val_acc\"");
  const auto timer = printed.output.find("class_path: \"Timer\"");
  EXPECT_TRUE(early != std::string::npos && early < monitor && monitor < timer && timer != std::string::npos)
      << printed.output;
  // Appending to what is not a list, a key inside a number or an empty list, and a missing one say what
  // to do.
  const std::vector<std::pair<std::string, std::string>> errors = {
      {"--trainer.max_epochs+=2",
       "'trainer.max_epochs' holds 1, not a list of entries to append to; set it with --trainer.max_epochs=<value>"},
      {"--trainer.callbacks=[] --trainer.callbacks.patience=2",
       "'trainer.callbacks' is an empty list, so it has no last entry to set 'patience' of; append one first "
       "(--trainer.callbacks+=<class name>)"},
      {"--trainer.max_epochs.x=2",
       "'trainer.max_epochs' holds 1, which has no key 'x'; set 'trainer.max_epochs' itself "
       "(--trainer.max_epochs=<value>)"},
      {"--trainer.devices=[0,1] --trainer.devices.x=2",
       "'trainer.devices' holds [0,1], which has no key 'x' in its last entry; set 'trainer.devices' itself "
       "(--trainer.devices=<value>)"},
      // A plain value is no class to give keys to (where "CSVLogger" is: above).
      {"--trainer.accelerator=cpu --trainer.accelerator.x=1",
       "'trainer.accelerator' holds \"cpu\", which has no key 'x'; set 'trainer.accelerator' itself"},
      // A required key of an entry is given as the other keys after it.
      {"--trainer.logger+=CSVLogger",
       "missing config key 'trainer.logger[0].init_args.save_dir'; give it on the command line: "
       "--trainer.logger.save_dir=<value>, after the flag that added its entry"},
      {"--trainer.logger=CSVLogger --trainer.logger.name=x",
       "missing config key 'trainer.logger.init_args.save_dir'; give it on the command line: "
       "--trainer.logger.save_dir=<value>"}};
  for (const auto& [flags, message] : errors) {
    const auto run = arc("fit " + flags);
    EXPECT_EQ(run.status, 2) << run.output;
    expect_in(run.output, message);
  }
  fs::remove_all(dir);
}

// LightningCLI's model section and {class_path, init_args} module and data entries build what
// Arclight's module section names: the same weights, and --print_config keeps the section's spelling,
// so that its output runs again.
TEST(Config, LightningCliModelAndDataEntriesNameTheSameClasses) {
  const auto dir = fresh_folder("model");
  const std::string trainer =
      "trainer:\n  limit_train_batches: 10\n  limit_val_batches: 1\n  num_threads: 1\n"
      "  enable_progress_bar: false\n  logger: false\n  enable_checkpointing: false\n";
  const auto run = [&](const std::string& name, const std::string& sections, const std::string& flags = "") {
    return arc_in(dir, "fit --config " + write_config(name, trainer + sections) + flags);
  };
  const auto arclight = run("module.yaml", "module: {name: mlp_classifier, hidden: 64}\ndata: {batch_size: 32}\n");
  const auto model = run("model.yaml", "model: {name: mlp_classifier, hidden: 64}\ndata: {batch_size: 32}\n");
  const std::string entries =
      "model:\n  class_path: my_project.models.mlp_classifier\n  init_args: {hidden: 64}\n"
      "data:\n  class_path: canonical\n  init_args: {batch_size: 32}\n";
  const auto lightning = run("entries.yaml", entries);
  // jsonargparse's flags: keys beside class_path are init_args.
  const auto flags = run("trainer.yaml", "",
                         " --model.class_path my_project.models.mlp_classifier --model.hidden 64 --data.class_path "
                         "canonical --data.batch_size=32");
  for (const auto* each : {&arclight, &model, &lightning, &flags}) ASSERT_EQ(each->status, 0) << each->output;
  const auto weights = result_of(arclight.output)["final_param_sha256"];
  EXPECT_EQ(result_of(model.output)["final_param_sha256"], weights);
  EXPECT_EQ(result_of(lightning.output)["final_param_sha256"], weights);
  EXPECT_EQ(result_of(flags.output)["final_param_sha256"], weights);
  // A hidden size of 64, not the default's: the summary's first layer has 784 x 64 + 64 parameters.
  EXPECT_NE(lightning.output.find("50240"), std::string::npos) << lightning.output;
  const auto printed = run("entries.yaml", entries, " --print_config 2>/dev/null");
  ASSERT_EQ(printed.status, 0) << printed.output;
  EXPECT_EQ(printed.output.find("module:"), std::string::npos) << printed.output;
  const auto again = arc_in(dir, "fit --config " + write_config("printed.yaml", printed.output));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(result_of(again.output)["final_param_sha256"], weights);
  // The CNN by a LightningCLI flag; both spellings of the section at once are an error.
  const auto cnn = arc_in(dir,
                          "fit --model.class_path cnn_classifier --trainer.max_steps=2 --trainer.logger=false "
                          "--trainer.limit_val_batches=0 --trainer.enable_progress_bar=false");
  ASSERT_EQ(cnn.status, 0) << cnn.output;
  EXPECT_NE(cnn.output.find("Conv2d"), std::string::npos) << cnn.output;
  // {file, content, the error it gives}
  const std::vector<std::array<std::string, 3>> bad = {
      {"both.yaml", "module: {hidden: 64}\nmodel: {hidden: 32}\n",
       "the config has both 'module' and 'model' (LightningCLI's name for the same section); keep one of them"},
      {"hiden.yaml", "model: {class_path: mlp_classifier, init_args: {hiden: 64}}\n",
       "unknown config key 'model.init_args.hiden'; did you mean 'hidden'? known keys in 'model.init_args': hidden, "
       "lr, momentum"},
      {"twice.yaml", "model: {class_path: mlp_classifier, hidden: 32, init_args: {hidden: 64}}\n",
       "model.hidden (32) and model.init_args.hidden (64) disagree; set one of them (--model.init_args.hidden=<value> "
       "overrides a config file's)"},
      {"class.yaml", "model: {class_path: my_project.mlp_clasifier}\n",
       "model (my_project.mlp_clasifier): unknown module 'mlp_clasifier'; did you mean 'mlp_classifier'?"}};
  for (const auto& [name, content, message] : bad) expect_in(error_for(name, content), name + ": " + message);
  fs::remove_all(dir);
}

// Three short epochs with LearningRateMonitor (and `more_callbacks`, YAML list entries), and
// LightningCLI's optimizer and lr_scheduler sections: Adam at 1e-3, halved every epoch by StepLR.
std::string adam_halved_each_epoch(const std::string& more_callbacks = "") {
  return "trainer:\n"
         "  max_epochs: 3\n"
         "  limit_train_batches: 10\n"
         "  limit_val_batches: 2\n"
         "  num_threads: 1\n"
         "  enable_progress_bar: false\n"
         "  callbacks:\n"
         "    - class_path: LearningRateMonitor\n" +
         more_callbacks +
         "optimizer: {class_path: Adam, init_args: {lr: 1e-3}}\n"
         "lr_scheduler:\n"
         "  class_path: StepLR\n"
         "  init_args: {step_size: 1, gamma: 0.5}\n";
}

// The optimizer and scheduler sections set the rate, as LearningRateMonitor's lr-Adam column shows.
TEST(Config, OptimizerAndSchedulerFromTheConfigSetTheLearningRate) {
  const auto dir = fresh_folder("optimizer");
  const auto run = arc_in(dir, "fit --config " + write_config("optimizer.yaml", adam_halved_each_epoch()));
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(column(dir + "/lightning_logs/version_0/metrics.csv", "lr-Adam"),
            (std::vector<double>{0.001, 0.0005, 0.00025}));
  // LightningCLI's flags, init_args beside class_path: the same rates.
  std::string trainer_only = adam_halved_each_epoch();
  trainer_only.erase(trainer_only.find("optimizer:"));
  const auto flags =
      arc_in(dir, "fit --config " + write_config("trainer.yaml", trainer_only) +
                      " --optimizer.class_path Adam --optimizer.lr 1e-3 --lr_scheduler.class_path StepLR "
                      "--lr_scheduler.step_size 1 --lr_scheduler.gamma 0.5");
  ASSERT_EQ(flags.status, 0) << flags.output;
  EXPECT_EQ(column(dir + "/lightning_logs/version_1/metrics.csv", "lr-Adam"),
            (std::vector<double>{0.001, 0.0005, 0.00025}));
  // LightningCLI's --optimizer=<class>: over the file's own Adam it keeps the file's rate; another
  // class takes none of it, so SGD's required rate is asked for, as a flag.
  const auto whole = arc_in(dir, "fit --config " + write_config("adam.yaml", adam_halved_each_epoch()) +
                                     " --optimizer=torch.optim.Adam --optimizer.betas=[0.8,0.99] --lr_scheduler StepLR "
                                     "--lr_scheduler.gamma=0.25");
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_EQ(column(dir + "/lightning_logs/version_2/metrics.csv", "lr-Adam"),
            (std::vector<double>{0.001, 0.00025, 0.0000625}));
  EXPECT_NE(arc::testing::read_file(dir + "/lightning_logs/version_2/config.yaml").find("betas:\n      - 0.8"),
            std::string::npos);
  expect_in(
      arc_in(dir, "fit --config " + write_config("adam.yaml", adam_halved_each_epoch()) + " --optimizer=SGD").output,
      "--set: missing config key 'optimizer.init_args.lr'; give it on the command line: --optimizer.lr=<value>");
  const auto bad = arc("fit --config " + write_config("adm.yaml", "optimizer: {class_path: Adm}\n"));
  EXPECT_NE(bad.output.find("adm.yaml: optimizer (Adm): unknown optimizer 'Adm'; did you mean 'Adam'?"),
            std::string::npos)
      << bad.output;
  fs::remove_all(dir);
}

TEST(Config, PrintConfigRoundTripsToTheSameRun) {
  const auto dir = fresh_folder("print");
  const std::string limits =
      " --set trainer.limit_train_batches=30 --set trainer.limit_val_batches=2 "
      "--set trainer.enable_progress_bar=false --set trainer.num_threads=1";
  // As LightningCLI's, every init_arg of the module, data, callbacks, optimizer and scheduler is spelt
  // out with the default its class took, so that the printed config repeats the run by itself.
  const auto base = write_config("base.yaml",
                                 "trainer:\n  max_epochs: 3\n  seed: 7\n  callbacks:\n"
                                 "    - {class_path: EarlyStopping, init_args: {monitor: val_loss}}\n"
                                 "module:\n  lr: 1e-3\noptimizer: {class_path: SGD, lr: 0.02}\n"
                                 "lr_scheduler: {class_path: StepLR, init_args: {step_size: 1}}\n");
  const auto later = write_config("later.json", R"({"trainer": {"max_epochs": 1}})");
  const auto printed =
      arc_in(dir, "fit --print_config --config " + base + " --config " + later + limits + " 2>/dev/null");
  ASSERT_EQ(printed.status, 0) << printed.output;
  for (const char* line :
       {"  max_epochs: 1\n", "  seed: 7\n", "  lr: 0.001\n", "  limit_train_batches: 30\n",
        "  accumulate_grad_batches: 1\n", "  name: \"mlp_classifier\"\n", "  hidden: 256\n", "  val_batch_size: 1000\n",
        "    - class_path: \"EarlyStopping\"\n      init_args:\n", "        patience: 3\n",
        "optimizer:\n  class_path: \"SGD\"\n  init_args:\n    dampening: 0.0\n    lr: 0.02\n    momentum: 0.0\n",
        "lr_scheduler:\n  class_path: \"StepLR\"\n  init_args:\n    frequency: 1\n    gamma: 0.1\n"})
    EXPECT_NE(printed.output.find(line), std::string::npos) << line << " in\n" << printed.output;
  EXPECT_EQ(result_of(printed.output), nullptr) << "--print_config trains nothing";
  const auto from_printed = arc_in(dir, "fit --config " + write_config("printed.yaml", printed.output));
  const auto direct = arc_in(dir, "fit --config " + base + " --config " + later + limits);
  ASSERT_EQ(from_printed.status, 0) << from_printed.output;
  ASSERT_EQ(direct.status, 0) << direct.output;
  EXPECT_EQ(result_of(from_printed.output)["final_param_sha256"], result_of(direct.output)["final_param_sha256"]);
  EXPECT_EQ(result_of(direct.output)["steps"], 30);
  fs::remove_all(dir);
}

// Each bad config is an error that names the file, the key and the fix, and trains nothing.
TEST(Config, BadConfigsNameTheFileAndTheKey) {
  const std::string callbacks =
      "trainer:\n  callbacks:\n    - class_path: EarlyStopping\n"
      "      init_args: {monitor: val_loss}\n    - class_path: ModelCheckpoint\n";
  expect_in(error_for("bool.yaml", "trainer:\n  deterministic: yes\n"),
            "bool.yaml:2: trainer.deterministic: 'yes' is a boolean in YAML 1.1 but text in YAML 1.2; write true or "
            "false");
  const auto unknown = error_for("unknown.yaml", callbacks + "      init_args: {mode: max, monitr: val_acc}\n");
  expect_in(unknown,
            "unknown.yaml: unknown config key 'trainer.callbacks[1].init_args.monitr'; did you mean 'monitor'?");
  EXPECT_EQ(unknown.find("(and: "), std::string::npos) << "said once:\n" << unknown;
  // A misspelt required key: the misspelling and the missing key, not a list of known keys that
  // stopped at the missing one.
  const auto required = error_for("required.yaml",
                                  "trainer:\n  callbacks:\n    - class_path: EarlyStopping\n"
                                  "      init_args: {monitr: val_loss, patience: 2}\n");
  expect_in(required,
            "required.yaml: unknown config key 'trainer.callbacks[0].init_args.monitr'; did you mean 'monitor'? (and: "
            "missing config key 'trainer.callbacks[0].init_args.monitor'; add it to the config)");
  EXPECT_EQ(required.find("known keys"), std::string::npos) << required;
  expect_in(error_for("type.yaml", callbacks + "      init_args: {save_top_k: two}\n"),
            "type.yaml: config key 'trainer.callbacks[1].init_args.save_top_k' must be an integer, got \"two\"");
  const auto impossible = error_for("mode.yaml", callbacks + "      init_args: {mode: maximum}\n");
  expect_in(impossible,
            "mode.yaml: trainer.callbacks[1].init_args.mode (ModelCheckpoint): ModelCheckpoint mode must be");
  // The optimizer and scheduler are checked when the config is read: --print_config, which trains
  // nothing, already fails.
  const auto step_size =
      arc("fit --print_config --config " +
          write_config("step.yaml", "lr_scheduler: {class_path: StepLR, init_args: {step_size: 0}}\n"));
  EXPECT_EQ(step_size.status, 2) << step_size.output;
  expect_in(step_size.output,
            "step.yaml: lr_scheduler.init_args.step_size (StepLR): StepLR step_size must be >= 1, got 0");
  const auto lr = arc("fit --print_config --config " +
                      write_config("lr.yaml", "optimizer: {class_path: Adam, init_args: {lr: -0.001}}\n"));
  EXPECT_EQ(lr.status, 2) << lr.output;
  expect_in(lr.output, "lr.yaml: optimizer.init_args.lr (Adam): Adam lr must be >= 0, got -0.001");
  expect_in(error_for("key.yaml", "trainer:\n  ? [a, b]\n  : 1\n"),
            "key.yaml:2: trainer: a key is a list; keys must be plain names");
  expect_in(error_for("class.yaml", "trainer:\n  callbacks:\n    - class_path: EarlyStoping\n"),
            "class.yaml: trainer.callbacks[0] (EarlyStoping): unknown callback 'EarlyStoping'; did you mean "
            "'EarlyStopping'?");
  const auto unknown_class =
      error_for("class_args.yaml",
                "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.EarlyStoping\n"
                "      init_args: {monitor: val_loss}\n");
  expect_in(unknown_class,
            "class_args.yaml: trainer.callbacks[0] (lightning.pytorch.callbacks.EarlyStoping): unknown callback "
            "'EarlyStoping'; did you mean 'EarlyStopping'?");
  EXPECT_EQ(unknown_class.find("unknown config key"), std::string::npos) << unknown_class;
  expect_in(error_for("logger.yaml", "trainer:\n  logger: {class_path: CSVLogger, init_args: {save_dri: logs}}\n"),
            "logger.yaml: unknown config key 'trainer.logger.init_args.save_dri'; did you mean 'save_dir'?");
  expect_in(error_for("syntax.yaml", "trainer: [max_epochs: 1\n"), "syntax.yaml:");
  expect_in(error_for("syntax.yaml", "trainer: [max_epochs: 1\n"), "not valid YAML");
  // A quoted value stays text: the trainer says what it expected.
  expect_in(error_for("quoted.yaml", "trainer:\n  max_epochs: \"3\"\n"),
            "quoted.yaml: config key 'trainer.max_epochs' must be an integer, got \"3\"");
}

// StochasticWeightAveraging from a config: swa_lrs a number (or a list), the rest Lightning's names.
// A trainer section as LightningCLI's --print_config writes it (every unset option null, callbacks and
// logger null, seed_everything true) runs; null is each option's default. The top-level ckpt_path is
// what --ckpt gives, and the flag wins over it.
TEST(Config, LightningCliPrintedConfigRunsWithNullsAsDefaults) {
  const auto dir = fresh_folder("lightning_printed");
  std::string trainer = "trainer:\n";
  for (const char* line : {"accelerator: auto",
                           "strategy: auto",
                           "devices: auto",
                           "num_nodes: 1",
                           "precision: 32-true",
                           "logger: null",
                           "callbacks: null",
                           "fast_dev_run: false",
                           "max_epochs: 1",
                           "min_epochs: null",
                           "max_steps: -1",
                           "min_steps: null",
                           "max_time: null",
                           "limit_train_batches: 5",
                           "limit_val_batches: 2",
                           "limit_test_batches: null",
                           "limit_predict_batches: null",
                           "overfit_batches: 0.0",
                           "val_check_interval: null",
                           "check_val_every_n_epoch: 1",
                           "num_sanity_val_steps: null",
                           "log_every_n_steps: null",
                           "enable_checkpointing: null",
                           "enable_progress_bar: false",
                           "enable_model_summary: null",
                           "accumulate_grad_batches: 1",
                           "gradient_clip_val: null",
                           "gradient_clip_algorithm: null",
                           "deterministic: null",
                           "benchmark: null",
                           "inference_mode: true",
                           "use_distributed_sampler: true",
                           "profiler: null",
                           "detect_anomaly: false",
                           "barebones: false",
                           "plugins: null",
                           "sync_batchnorm: false",
                           "reload_dataloaders_every_n_epochs: 0",
                           "default_root_dir: null",
                           "num_threads: 1"})
    trainer += std::string("  ") + line + "\n";
  const auto fit =
      arc_in(dir, "fit --config " + write_config("printed.yaml", "seed_everything: true\nckpt_path: null\n" + trainer));
  ASSERT_EQ(fit.status, 0) << fit.output;
  EXPECT_EQ(result_of(fit.output)["steps"], 5);
  EXPECT_TRUE(fs::exists(dir + "/lightning_logs/version_0/checkpoints/last.ckpt"))
      << "enable_checkpointing: null is on";
  const auto last_yaml = write_config("last.yaml", "ckpt_path: last\n" + trainer);
  const auto from_key = arc_in(dir, "validate --config " + last_yaml);
  const auto from_flag = arc_in(dir, "validate --ckpt last --config " + write_config("plain.yaml", trainer));
  ASSERT_EQ(from_key.status, 0) << from_key.output;
  ASSERT_EQ(from_flag.status, 0) << from_flag.output;
  EXPECT_EQ(result_of(from_key.output), result_of(from_flag.output));
  const auto flag_wins = arc_in(dir, "validate --ckpt_path " + dir + "/none.ckpt --config " + last_yaml);
  EXPECT_EQ(flag_wins.status, 2) << flag_wins.output;
  EXPECT_NE(flag_wins.output.find("none.ckpt' does not exist"), std::string::npos) << flag_wins.output;
  fs::remove_all(dir);
}

// The callbacks as LightningCLI's --print_config writes them (Lightning 2.2's init_args, every one,
// nulls included) run as they are; verbose ones speak (the EarlyStopping on a training metric
// checks at the epoch's end, as there is no validation), and the learning-rate monitor logs momentum
// and weight decay.
TEST(Config, LightningCliPrintedCallbacksRunWithEveryInitArg) {
  const auto dir = fresh_folder("lightning_printed_callbacks");
  const std::string config = R"(trainer:
  max_epochs: 2
  limit_train_batches: 3
  limit_val_batches: 0
  num_threads: 1
  enable_progress_bar: false
  callbacks:
  - class_path: lightning.pytorch.callbacks.ModelCheckpoint
    init_args:
      dirpath: null
      filename: null
      monitor: train_loss
      verbose: true
      save_last: null
      save_top_k: 1
      save_weights_only: false
      mode: min
      auto_insert_metric_name: true
      every_n_train_steps: null
      train_time_interval: null
      every_n_epochs: null
      save_on_train_epoch_end: null
      enable_version_counter: true
  - class_path: lightning.pytorch.callbacks.EarlyStopping
    init_args:
      monitor: train_loss
      min_delta: 0.0
      patience: 3
      verbose: true
      mode: min
      strict: true
      check_finite: true
      stopping_threshold: null
      divergence_threshold: null
      check_on_train_epoch_end: null
      log_rank_zero_only: false
  - class_path: lightning.pytorch.callbacks.LearningRateMonitor
    init_args:
      logging_interval: null
      log_momentum: true
      log_weight_decay: true
  - class_path: lightning.pytorch.callbacks.Timer
    init_args:
      duration: 00:12:00:00
      interval: step
      verbose: true
module:
  name: mlp_classifier
)";
  const auto fit = arc_in(dir, "fit --config " + write_config("printed_callbacks.yaml", config));
  ASSERT_EQ(fit.status, 0) << fit.output;
  EXPECT_EQ(result_of(fit.output)["steps"], 6) << fit.output;
  EXPECT_NE(fit.output.find("EarlyStopping: train_loss improved; new best score"), std::string::npos) << fit.output;
  EXPECT_NE(fit.output.find("Epoch 0, global step 3: 'train_loss' reached "), std::string::npos) << fit.output;
  const auto metrics = dir + "/lightning_logs/version_0/metrics.csv";
  std::ifstream csv(metrics);
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("lr-SGD-momentum"), std::string::npos) << header;
  EXPECT_NE(header.find("lr-SGD-weight_decay"), std::string::npos) << header;
  fs::remove_all(dir);
}

// BackboneFinetuning from a config, on the example MLP with fc1 as the backbone: the example's
// optimizer takes what requires gradients, so fc1 joins it as a second group at epoch 1 (0.005, a
// tenth of WORKLOAD.md's 0.05), and its rate doubles at epoch 2; the rate monitor logs both groups.
TEST(Config, BackboneFinetuningFinetunesTheExampleModule) {
  const auto dir = fresh_folder("backbone_finetuning");
  const std::string config = R"(trainer:
  max_epochs: 3
  limit_train_batches: 2
  limit_val_batches: 0
  num_threads: 1
  enable_progress_bar: false
  callbacks:
  - class_path: lightning.pytorch.callbacks.BackboneFinetuning
    init_args: {unfreeze_backbone_at_epoch: 1, backbone: fc1, verbose: true}
  - class_path: LearningRateMonitor
module:
  name: mlp_classifier
)";
  const auto fit = arc_in(dir, "fit --config " + write_config("finetuning.yaml", config));
  ASSERT_EQ(fit.status, 0) << fit.output;
  EXPECT_NE(fit.output.find("Current lr: 0.05, Backbone lr: 0.005\n"), std::string::npos) << fit.output;
  EXPECT_NE(fit.output.find("Current lr: 0.05, Backbone lr: 0.01\n"), std::string::npos) << fit.output;
  EXPECT_EQ(fit.output.find("in the optimizer already"), std::string::npos) << fit.output;
  std::ifstream csv(dir + "/lightning_logs/version_0/metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("lr-SGD/pg2"), std::string::npos) << header;
  fs::remove_all(dir);
}

// PredictionWriter from a config: `arc predict` leaves each rank's predictions in files that Python's
// torch.load reads; put back in dataset order by their batch_indices, two ranks' predictions are one
// rank's, and the end-of-predict file holds what the per-batch files do.
TEST(Config, PredictionWriterLeavesPredictionsThatPythonReads) {
  const auto python = arc::testing::python_with_torch();
  ASSERT_FALSE(python.empty()) << arc::testing::kNoPythonWithTorch;
  const auto dir = fresh_folder("predictions");
  const auto predict = [&](const std::string& name, int devices) {
    const std::string writer = "{class_path: PredictionWriter, init_args: {output_dir: " + dir + "/" + name +
                               ", write_interval: batch_and_epoch}}";
    return arc_in(
        dir, "predict --config " + write_config(name + ".yaml", "trainer:\n  devices: " + std::to_string(devices) +
                                                                    "\n  num_threads: 1\n  enable_progress_bar: false\n"
                                                                    "  limit_predict_batches: 3\n  callbacks: [" +
                                                                    writer + "]\n"));
  };
  const auto one = predict("one", 1);
  ASSERT_EQ(one.status, 0) << one.output;
  const auto two = predict("two", 2);
  ASSERT_EQ(two.status, 0) << two.output;
  // The RESULT counts every rank's predictions; a run with a writer is not told to add one.
  EXPECT_EQ(arc::cli::read_report(one.output, "RESULT"), nlohmann::json({{"batches", 3}, {"predictions", 3000}}));
  EXPECT_EQ(arc::cli::read_report(two.output, "RESULT"), nlohmann::json({{"batches", 6}, {"predictions", 6000}}));
  EXPECT_EQ(two.output.find("not saved"), std::string::npos) << two.output;
  // As LightningCLI's, each predict run's log folder keeps its config and hyper-parameters.
  for (const auto& [version, devices] : {std::pair{"version_0", 1}, std::pair{"version_1", 2}}) {
    const auto folder = dir + "/lightning_logs/" + version;
    EXPECT_TRUE(fs::exists(folder + "/hparams.yaml")) << folder;
    EXPECT_NE(arc::testing::read_file(folder + "/config.yaml").find("devices: " + std::to_string(devices)),
              std::string::npos)
        << folder;
  }
  // Each folder's predictions by sample index, from the end-of-predict files and from the per-batch ones.
  const std::string script = dir + "/read.py";
  std::ofstream(script) << "import glob, json, sys, torch\n"
                           "def by_index(files, many):\n"
                           "    out = {}\n"
                           "    for f in files:\n"
                           "        d = torch.load(f, weights_only=True)\n"
                           "        pairs = zip(d['predictions'], d['batch_indices']) if many else "
                           "[(d['predictions'], d['batch_indices'])]\n"
                           "        for p, i in pairs:\n"
                           "            out.update(zip(i.tolist(), p.tolist()))\n"
                           "    return out\n"
                           "res = {}\n"
                           "for name in ('one', 'two'):\n"
                           "    end = by_index(glob.glob(sys.argv[1] + '/' + name + '/predictions_rank_*.pt'), True)\n"
                           "    batches = by_index(glob.glob(sys.argv[1] + '/' + name + '/rank_*_batch_*.pt'), False)\n"
                           "    res[name] = {'samples': len(end), 'batches_agree': end == batches}\n"
                           "    res[name + '_predictions'] = [end[k] for k in sorted(end)]\n"
                           "print('READ', json.dumps(res))\n";
  const auto read = arc::testing::run_command(python + " " + script + " " + dir);
  ASSERT_EQ(read.status, 0) << read.output;
  const auto found = arc::cli::read_report(read.output, "READ");
  EXPECT_EQ(found["one"]["samples"], 3000) << "three batches of 1000";
  EXPECT_EQ(found["two"]["samples"], 6000) << "three batches of 1000 on each rank";
  EXPECT_EQ(found["one"]["batches_agree"], true);
  EXPECT_EQ(found["two"]["batches_agree"], true);
  const auto& one_rank = found["one_predictions"];
  const auto& two_ranks = found["two_predictions"];
  ASSERT_EQ(two_ranks.size(), 6000u);
  // One rank predicted samples 0..2999; two ranks 0..5999, of which the first 3000 are the same samples.
  EXPECT_EQ(nlohmann::json(std::vector<nlohmann::json>(two_ranks.begin(), two_ranks.begin() + 3000)), one_rank);
  // LibTorch reads them too.
  std::ifstream file(dir + "/one/predictions_rank_0.pt", std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto contents = torch::pickle_load(bytes).toGenericDict();
  const auto predictions = contents.at("predictions").toList();
  ASSERT_EQ(predictions.size(), 3u);
  EXPECT_EQ(predictions.get(0).toTensor().size(0), 1000);
  EXPECT_EQ(contents.at("batch_indices").toList().get(2).toTensor()[0].item<int64_t>(), 2000);
  const auto bad = arc_in(dir,
                          "predict --set trainer.limit_predict_batches=1 --set 'trainer.callbacks=[{\"class_path\": "
                          "\"PredictionWriter\", \"init_args\": {\"output_dir\": \"out\", "
                          "\"write_interval\": \"sometimes\"}}]'");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("trainer.callbacks[0].init_args.write_interval (PredictionWriter): PredictionWriter "
                            "write_interval must be \"batch\", \"epoch\" or \"batch_and_epoch\", got 'sometimes'"),
            std::string::npos)
      << bad.output;
  const auto unwritable =
      arc_in(dir,
             "predict --trainer.devices=2 --trainer.limit_predict_batches=1 --set 'trainer.callbacks=[{\"class_path\": "
             "\"PredictionWriter\", \"init_args\": {\"output_dir\": \"/proc/arc_predictions\"}}]'");
  EXPECT_EQ(unwritable.status, 2) << unwritable.output;
  // Both ranks fail alike, and the tool prints it once.
  const std::string cause = "PredictionWriter cannot make its output_dir '/proc/arc_predictions' (";
  const size_t first = unwritable.output.find(cause);
  EXPECT_NE(first, std::string::npos) << unwritable.output;
  EXPECT_EQ(unwritable.output.find(cause, first + 1), std::string::npos) << unwritable.output;
  fs::remove_all(dir);
}

TEST(Config, StochasticWeightAveragingFromAConfig) {
  const std::string common =
      " --set trainer.max_epochs=2 --set trainer.limit_train_batches=20 --set trainer.limit_val_batches=1 "
      "--set trainer.num_threads=1 --set trainer.enable_progress_bar=false --set trainer.enable_checkpointing=false";
  const auto run = arc("fit --config " +
                       write_config("swa.yaml",
                                    "trainer:\n  callbacks:\n    - class_path: StochasticWeightAveraging\n"
                                    "      init_args: {swa_lrs: 0.01, swa_epoch_start: 2, annealing_epochs: 10, "
                                    "annealing_strategy: linear, avg_fn: null, device: cpu}\n") +
                       common);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(result_of(run.output)["steps"], 40);
  const auto missing =
      arc("fit --config " +
          write_config("swa_missing.yaml", "trainer:\n  callbacks:\n    - class_path: StochasticWeightAveraging\n") +
          common);
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("swa_lrs"), std::string::npos) << missing.output;
}

// The rate LearningRateFinder said it trains at (rank 0's line), as printed: exactly the double.
std::string rate_set_in(const std::string& output) {
  const std::string said = "training starts at learning rate ";
  const auto at = output.find(said);
  if (at == std::string::npos) return "";
  const auto start = at + said.size();
  return output.substr(start, output.find(' ', start) - start);
}

// A LightningCLI-printed LearningRateFinder entry: under ddp_spawn both ranks run the test (their
// gradients averaged), and training then runs exactly as a fit given the rate found, which
// hparams.yaml records. With the config's optimizer and scheduler, the optimizer starts at the rate
// and the scheduler halves it from there.
TEST(Config, LearningRateFinderTestsTheRateUnderDdpAndTrainsAtIt) {
  const auto dir = fresh_folder("lr_finder");
  const std::string trainer =
      "trainer:\n  strategy: ddp_spawn\n  devices: 2\n  max_epochs: 2\n  limit_train_batches: 20\n"
      "  limit_val_batches: 2\n  num_threads: 1\n  enable_progress_bar: false\n  seed: 3\n";
  const auto tuned =
      arc_in(dir, "fit --config " + write_config("tuned.yaml", trainer + "  callbacks:\n"
                                                                         "  - class_path: lightning.pytorch.callbacks."
                                                                         "LearningRateFinder\n"
                                                                         "    init_args:\n"
                                                                         "      min_lr: 1.0e-05\n"
                                                                         "      max_lr: 1.0\n"
                                                                         "      num_training_steps: 40\n"
                                                                         "      mode: exponential\n"
                                                                         "      early_stop_threshold: 4.0\n"
                                                                         "      update_attr: true\n"
                                                                         "      attr_name: ''\n"
                                                                         "      weights_only: null\n"));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  const auto rate = rate_set_in(tuned.output);
  ASSERT_FALSE(rate.empty()) << tuned.output;
  EXPECT_NE(std::stod(rate), 0.05) << "the module's own rate";
  std::stringstream hparams;
  hparams << std::ifstream(dir + "/lightning_logs/version_0/hparams.yaml").rdbuf();
  EXPECT_NE(hparams.str().find("lr: " + rate), std::string::npos) << hparams.str();
  const auto given =
      arc_in(dir, "fit --config " + write_config("given.yaml", trainer + "module:\n  lr: " + rate + "\n"));
  ASSERT_EQ(given.status, 0) << given.output;
  EXPECT_EQ(result_of(tuned.output)["final_param_sha256"], result_of(given.output)["final_param_sha256"]);
  EXPECT_EQ(result_of(tuned.output)["steps"], 40);

  const auto adam_dir = fresh_folder("lr_finder_adam");
  const std::string finder = "    - class_path: LearningRateFinder\n      init_args: {num_training_steps: 30}\n";
  const auto adam = arc_in(adam_dir, "fit --config " + write_config("adam.yaml", adam_halved_each_epoch(finder)));
  ASSERT_EQ(adam.status, 0) << adam.output;
  EXPECT_NE(adam.output.find("(the config's optimizer)"), std::string::npos) << adam.output;
  const double found = std::stod(rate_set_in(adam.output));
  const auto lr = column(adam_dir + "/lightning_logs/version_0/metrics.csv", "lr-Adam");
  ASSERT_EQ(lr.size(), 3u);
  for (size_t epoch = 0; epoch < lr.size(); ++epoch)  // metrics.csv keeps 10 significant digits
    EXPECT_NEAR(lr[epoch], found / std::pow(2, epoch), found * 1e-9) << "epoch " << epoch;
  // An optimizer named by its class_path alone takes the rate too, and so does one whose rate is given
  // beside class_path (jsonargparse's short form of init_args).
  for (const char* optimizer : {"torch.optim.Adam", "{class_path: Adam, lr: 0.01}"}) {
    const std::string yaml =
        "trainer: {max_epochs: 1, limit_train_batches: 10, num_threads: 1, callbacks: [LearningRateFinder]}\n"
        "optimizer: " +
        std::string(optimizer) + "\n";
    const auto run = arc_in(adam_dir, "fit --config " + write_config("optimizer.yaml", yaml));
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_FALSE(rate_set_in(run.output).empty()) << run.output;
  }
  fs::remove_all(dir);
  fs::remove_all(adam_dir);
}

// A LightningCLI-printed ModelPruning entry prunes the example MLP's 269,322 weights and biases by
// half at each epoch's end (the second time round(67330.5) = 67330, Python's rounding); a count
// prunes that many of the parameters named.
TEST(Config, LightningCliPrintedModelPruningPrunesTheExampleMlp) {
  const std::string trainer =
      "trainer:\n  max_epochs: 2\n  limit_train_batches: 5\n  limit_val_batches: 1\n  num_threads: 1\n"
      "  enable_progress_bar: false\n  enable_checkpointing: false\n  logger: false\n  callbacks:\n"
      "  - class_path: lightning.pytorch.callbacks.ModelPruning\n    init_args:\n";
  const auto printed =
      arc("fit --config " + write_config("pruning.yaml", trainer + "      pruning_fn: l1_unstructured\n"
                                                                   "      parameters_to_prune: null\n"
                                                                   "      parameter_names: null\n"
                                                                   "      use_global_unstructured: true\n"
                                                                   "      amount: 0.5\n"
                                                                   "      apply_pruning: true\n"
                                                                   "      make_pruning_permanent: true\n"
                                                                   "      use_lottery_ticket_hypothesis: "
                                                                   "true\n"
                                                                   "      resample_parameters: false\n"
                                                                   "      pruning_dim: null\n"
                                                                   "      pruning_norm: null\n"
                                                                   "      verbose: 1\n"
                                                                   "      prune_on_train_epoch_end: true\n"));
  // The run ended with `status` and said `text`.
  const auto ended_saying = [](const arc::testing::CommandRun& run, int status, const std::string& text) {
    EXPECT_EQ(run.status, status) << run.output;
    EXPECT_NE(run.output.find(text), std::string::npos) << text << " in\n" << run.output;
  };
  ended_saying(printed, 0, "Pruned: 0/269322 (0.00%) -> 134661/269322 (50.00%)");
  ended_saying(printed, 0, "Pruned: 134661/269322 (50.00%) -> 201991/269322 (75.00%)");
  const auto counted =
      arc("fit --config " + write_config("pruning_count.yaml", trainer + "      parameters_to_prune: [[fc3, weight]]\n"
                                                                         "      amount: 100\n"
                                                                         "      use_global_unstructured: false\n"
                                                                         "      verbose: 2\n"));
  ended_saying(counted, 0, "fc3.weight with amount=100: pruned 100 (3.91%) -> 200 (7.81%)");
  const auto bad =
      arc("fit --config " + write_config("pruning_bad.yaml", trainer + "      parameters_to_prune: [fc1]\n"));
  ended_saying(bad, 2, "must hold [submodule, parameter] pairs of names, got \"fc1\"");
}

// BatchSizeFinder's entry as LightningCLI prints it: the example MLP trains with the size found (up to
// max_val here); a ddp_spawn fit is an error, as Lightning's.
TEST(Config, LightningCliPrintedBatchSizeFinderScalesTheExampleMlp) {
  const std::string config =
      "trainer:\n  max_epochs: 1\n  limit_train_batches: 2\n  limit_val_batches: 1\n  num_threads: 1\n"
      "  enable_progress_bar: false\n  enable_checkpointing: false\n  logger: false\n  callbacks:\n"
      "  - class_path: lightning.pytorch.callbacks.BatchSizeFinder\n    init_args:\n      mode: power\n"
      "      steps_per_trial: 1\n      init_val: 2\n      max_trials: 25\n      batch_arg_name: batch_size\n"
      "      margin: 0.05\n      max_val: 256\n";
  const auto path = write_config("batch_size_finder.yaml", config);
  const auto scaled = arc("fit --config " + path);
  EXPECT_EQ(scaled.status, 0) << scaled.output;
  EXPECT_NE(scaled.output.find("BatchSizeFinder: training with batch size 256"), std::string::npos) << scaled.output;
  const auto spawned = arc("fit --config " + path + " --trainer.devices 2 --trainer.strategy ddp_spawn");
  EXPECT_NE(spawned.status, 0);
  EXPECT_NE(spawned.output.find("BatchSizeFinder searches in one process (as Lightning's), and this fit has 2 ranks"),
            std::string::npos)
      << spawned.output;
}

// SpikeDetection's entry as LightningCLI prints it, with rtol 0: the first loss above the one before
// is a spike, which ends fit and lists the batch and the one before in exclude_batches_path.
TEST(Config, LightningCliPrintedSpikeDetectionEndsFitAtTheFirstRise) {
  const auto dir = arc::testing::process_scratch() / "spikes";
  std::filesystem::remove_all(dir);
  const std::string config =
      "trainer:\n  max_epochs: 1\n  limit_train_batches: 40\n  limit_val_batches: 1\n  num_threads: 1\n"
      "  enable_progress_bar: false\n  enable_checkpointing: false\n  logger: false\n  callbacks:\n"
      "  - class_path: lightning.pytorch.callbacks.SpikeDetection\n    init_args:\n      mode: min\n"
      "      window: 10\n      warmup: 1\n      atol: null\n      rtol: 0.0\n      exclude_batches_path: " +
      dir.string() + "\n      finite_only: true\n";
  const auto run = arc("fit --config " + write_config("spike_detection.yaml", config));
  EXPECT_NE(run.status, 0);
  const auto at = run.output.find("Training spike detected in batch ");
  ASSERT_NE(at, std::string::npos) << run.output;
  const int64_t batch = std::stoll(run.output.substr(at + 33));
  const auto listed = nlohmann::json::parse(std::ifstream(dir / "skip_batches.json"));
  EXPECT_EQ(listed, nlohmann::json({batch - 1, batch})) << run.output;
  std::filesystem::remove_all(dir);
}

// The example YAML config (apps/configs/mlp.yaml, which docs/cli.md shows), shortened to a few
// batches, trains and writes where it says.
TEST(Config, ExampleYamlRuns) {
  const std::string config = std::string(ARC_SOURCE_DIR) + "/apps/configs/mlp.yaml";
  const auto dir = fresh_folder("example_yaml");
  const auto run = arc_in(dir, "fit --config " + config +
                                   " --set trainer.limit_train_batches=20 --set trainer.num_threads=1 "
                                   "--set trainer.enable_progress_bar=false");
  ASSERT_EQ(run.status, 0) << run.output;
  const int steps = result_of(run.output)["steps"].get<int>();
  EXPECT_TRUE(steps >= 30 && steps <= 60) << steps << " steps: three epochs of 20, or EarlyStopping after two";
  const auto version = dir + "/logs/lightning_logs/version_0";
  EXPECT_TRUE(fs::exists(version + "/metrics.csv"));
  std::ifstream csv(version + "/metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("lr-AdamW"), std::string::npos) << header;
  EXPECT_EQ(files_in(version + "/checkpoints").size(), 3u) << "save_top_k: 2, and last.ckpt";
  fs::remove_all(dir);
}

// Lightning's progress bars on a terminal (with their defaults, one line for the whole fit, each
// validation drawn over it and the line given back; with leave, a line per epoch) and
// RichModelSummary's table; a bar of refresh rate 0 draws nothing and Rich's theme is said to be left out.
TEST(Config, LightningsProgressBarsDrawOnATerminal) {
  const auto dir = fresh_folder("progress_bars");
  const auto on_a_terminal = [&](const std::string& name, const std::string& callbacks) {
    const std::string config =
        "trainer:\n  max_epochs: 3\n  limit_train_batches: 2\n  limit_val_batches: 1\n"
        "  num_threads: 1\n  callbacks:\n" +
        callbacks + "module:\n  name: mlp_classifier\n";
    arc::testing::Terminal terminal(
        {ARC_BINARY, "fit", "--config", write_config(name, config), "--set", "trainer.default_root_dir=" + dir});
    EXPECT_EQ(terminal.wait_exit(300), 0) << terminal.output();
    return terminal.output();
  };
  // The lines of `output` (the terminal ends each with "\r\n") that hold "Epoch ".
  const auto epoch_lines = [](const std::string& output) {
    std::vector<std::string> lines;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.find("Epoch ") != std::string::npos) lines.push_back(line);
    return lines;
  };

  const auto tqdm = on_a_terminal("tqdm.yaml",
                                  "  - class_path: lightning.pytorch.callbacks.TQDMProgressBar\n"
                                  "    init_args: {refresh_rate: 1, process_position: 0, leave: false}\n"
                                  "  - class_path: lightning.pytorch.callbacks.RichModelSummary\n"
                                  "    init_args: {max_depth: 1}\n");
  const auto one_line = epoch_lines(tqdm);
  ASSERT_EQ(one_line.size(), 1u) << tqdm;
  EXPECT_NE(one_line[0].find("\rEpoch 0: 2/2 ["), std::string::npos) << tqdm;
  EXPECT_NE(one_line[0].find("\rEpoch 2: 2/2 ["), std::string::npos) << tqdm;
  EXPECT_NE(one_line[0].rfind("val_loss="), std::string::npos) << tqdm;
  EXPECT_NE(tqdm.find("269322 trainable params"), std::string::npos) << tqdm;

  const auto left = epoch_lines(on_a_terminal("leave.yaml",
                                              "  - class_path: TQDMProgressBar\n"
                                              "    init_args: {leave: true}\n"));
  ASSERT_EQ(left.size(), 3u);
  for (int epoch = 0; epoch < 3; ++epoch)
    EXPECT_NE(left[static_cast<size_t>(epoch)].find("Epoch " + std::to_string(epoch) + ": 2/2 ["), std::string::npos)
        << left[static_cast<size_t>(epoch)];

  const auto off = on_a_terminal("rich.yaml",
                                 "  - class_path: RichProgressBar\n"
                                 "    init_args:\n      refresh_rate: 0\n      theme: {description: white}\n");
  EXPECT_TRUE(epoch_lines(off).empty()) << off;
  EXPECT_NE(off.find("config key 'trainer.callbacks[0].init_args.theme' is not used"), std::string::npos) << off;
  fs::remove_all(dir);
}

}  // namespace
