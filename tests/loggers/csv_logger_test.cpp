#include "support/scratch.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

namespace arc {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

TEST(CSVLogger, LightningLayoutWithNextFreeVersionAndUnionHeader) {
  const auto root = arc::testing::process_scratch() / "csv";
  fs::remove_all(root);
  fs::create_directories(root / "lightning_logs" / "version_0");
  auto logger = std::make_shared<CSVLogger>(root.string());
  EXPECT_EQ(logger->version(), "version_1");
  testing::TinyModule module;
  module.save_hyperparameters({{"lr", 0.1}});
  Trainer trainer(testing::quiet().max_epochs(2).log_every_n_steps(2).num_sanity_val_steps(0), {}, {logger});
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(4, 2));
  EXPECT_EQ(trainer.log_dir(), (root / "lightning_logs" / "version_1").string());
  const auto rows = lines(logger->log_dir() + "/metrics.csv");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front(), "epoch,step,train_loss,val_loss");
  // 8 step rows (every 2 of 8 steps... 4) + 2 validation rows + 2 train-epoch rows with nothing logged.
  EXPECT_EQ(rows.size(), 1u + 4u + 2u);
  EXPECT_TRUE(fs::exists(logger->log_dir() + "/hparams.yaml"));
  fs::remove_all(root);
}

// Lightning's logger=True: a Trainer given no logger writes CSV and TensorBoard logs and hparams.yaml
// to <default_root_dir>/lightning_logs/version_N, its checkpoints inside; logger(false) writes none.
TEST(DefaultLogger, TrainerWithoutLoggersWritesANewLightningLogsVersionPerRun) {
  const auto root = arc::testing::process_scratch() / "default_logger";
  fs::remove_all(root);
  for (int run = 0; run < 2; ++run) {
    testing::TinyModule module;
    module.save_hyperparameters({{"lr", 0.1}, {"name", "tiny"}});
    auto options = testing::quiet().logger(true).enable_checkpointing(true).default_root_dir(root.string());
    Trainer trainer(options.max_epochs(1).log_every_n_steps(1).num_sanity_val_steps(0));
    ASSERT_EQ(trainer.loggers().size(), 2u);
    trainer.fit(module, testing::tiny_data(8, 2));
    const auto version = root / "lightning_logs" / ("version_" + std::to_string(run));
    EXPECT_EQ(trainer.log_dir(), version.string());
    EXPECT_GT(lines((version / "metrics.csv").string()).size(), 1u);
    EXPECT_TRUE(fs::exists(version / "checkpoints" / "last.ckpt"));
    EXPECT_EQ(lines((version / "hparams.yaml").string()), (std::vector<std::string>{"lr: 0.1", "name: \"tiny\""}));
    bool events = false;
    for (const auto& entry : fs::directory_iterator(version))
      events = events || entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    EXPECT_TRUE(events);
  }
  // test (as validate and predict) sends the hyper-parameters too, as every stage of Lightning's.
  testing::TinyModule tested;
  tested.save_hyperparameters({{"lr", 0.2}});
  Trainer(testing::quiet().logger(true).default_root_dir(root.string())).test(tested, testing::tiny_data(8, 2));
  EXPECT_EQ(lines((root / "lightning_logs" / "version_2" / "hparams.yaml").string()),
            (std::vector<std::string>{"lr: 0.2"}));
  fs::remove_all(root);
  testing::TinyModule module;
  Trainer(testing::quiet().logger(false).default_root_dir(root.string()).max_epochs(1))
      .fit(module, testing::tiny_data(8, 2));
  EXPECT_FALSE(fs::exists(root / "lightning_logs"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace arc

namespace arc {
namespace {

TEST(JsonLinesLogger, OneObjectPerLoggedStepAndSeveralLoggersAtOnce) {
  const auto root = arc::testing::process_scratch() / "jsonl";
  fs::remove_all(root);
  auto jsonl = std::make_shared<JsonLinesLogger>(root.string());
  auto csv = std::make_shared<CSVLogger>(root.string(), "csv");
  testing::TinyModule module;
  Trainer trainer(testing::quiet().max_steps(6).log_every_n_steps(3), {}, {jsonl, csv});
  trainer.fit(module, testing::tiny_data(12, 2));
  const auto rows = lines(jsonl->log_dir() + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  const auto first = nlohmann::json::parse(rows[0]);
  // Lightning's step: the stepped batches before the logged one.
  EXPECT_EQ(first["step"], 2);
  EXPECT_TRUE(first.contains("train_loss"));
  EXPECT_EQ(nlohmann::json::parse(rows[1])["step"], 5);
  EXPECT_EQ(lines(csv->log_dir() + "/metrics.csv").size(), 3u);
  fs::remove_all(root);
}

// As Lightning's: the CSV and TensorBoard loggers of one save_dir and name share one version_N,
// nothing is created before the Trainer claims it, and a resumed run (ckpt_path "last", found among the
// versions) writes on in the version folder of the run it continues.
TEST(Loggers, OneFolderSharesAVersionAndAResumeContinuesIt) {
  const auto root = arc::testing::process_scratch() / "versions";
  fs::remove_all(root);
  fs::create_directories(root / "lightning_logs" / "version_0");
  const auto options = [&](int64_t epochs) {
    return testing::quiet()
        .default_root_dir(root.string())
        .enable_checkpointing(true)
        .max_epochs(epochs)
        .log_every_n_steps(1);
  };
  auto csv = std::make_shared<CSVLogger>(root.string());
  auto tensorboard = std::make_shared<TensorBoardLogger>(root.string());
  EXPECT_FALSE(fs::exists(root / "lightning_logs" / "version_1")) << "a logger made a folder before any write";
  testing::TinyModule module;
  Trainer first(options(2), {}, {csv, tensorboard});
  first.fit(module, testing::tiny_data(8, 2));
  EXPECT_EQ(csv->version(), "version_1");
  EXPECT_EQ(tensorboard->version(), "version_1");
  std::vector<std::string> versions;
  for (const auto& entry : fs::directory_iterator(root / "lightning_logs"))
    versions.push_back(entry.path().filename().string());
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(versions, (std::vector<std::string>{"version_0", "version_1"}));
  const auto first_rows = lines(csv->log_dir() + "/metrics.csv").size();
  ASSERT_EQ(first_rows, 9u) << "a header and a row for each of the 8 steps";
  ASSERT_TRUE(fs::exists(root / "lightning_logs" / "version_1" / "checkpoints" / "last.ckpt"));

  auto resumed_csv = std::make_shared<CSVLogger>(root.string());
  auto resumed_tensorboard = std::make_shared<TensorBoardLogger>(root.string());
  testing::TinyModule again;
  Trainer second(options(4), {}, {resumed_csv, resumed_tensorboard});
  second.fit(again, testing::tiny_data(8, 2), {}, "last");
  EXPECT_EQ(second.current_epoch(), 4);
  EXPECT_EQ(resumed_csv->version(), "version_1");
  EXPECT_EQ(resumed_tensorboard->version(), "version_1");
  EXPECT_FALSE(fs::exists(root / "lightning_logs" / "version_2")) << "the resumed run left the folder it claimed";
  const auto rows = lines(resumed_csv->log_dir() + "/metrics.csv");
  EXPECT_EQ(rows.size(), 1 + 2 * (first_rows - 1)) << "the resumed run keeps the rows of the first";
  fs::remove_all(root);
}

// Runs that start at once in one folder (Lightning's would share a version_N and overwrite each
// other's metrics.csv): each claims a number of its own by creating its folder.
TEST(Loggers, RunsStartingAtOnceClaimVersionsOfTheirOwn) {
  const auto root = arc::testing::process_scratch() / "claims";
  fs::remove_all(root);
  constexpr int kRuns = 16;
  std::vector<int64_t> claimed(kRuns, -1);
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i)
    runs.emplace_back([&, i] { claimed[i] = claim_next_version((root / "lightning_logs").string()); });
  for (auto& run : runs) run.join();
  std::sort(claimed.begin(), claimed.end());
  for (int i = 0; i < kRuns; ++i) {
    EXPECT_EQ(claimed[i], i);
    EXPECT_TRUE(fs::is_directory(root / "lightning_logs" / ("version_" + std::to_string(i))));
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace arc
