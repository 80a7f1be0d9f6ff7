// TensorBoard event files: decoded record by record, CRCs checked, Event/Summary parsed.
#include "loggers/tensorboard.pb.h"
#include "support/scratch.h"
#include "support/tiny_module.h"

#include <arc/base/detail/crc32c.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace arc {
namespace {

namespace fs = std::filesystem;

uint64_t little_endian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

// Every record's payload, after checking both masked CRC32Cs.
std::vector<std::string> records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = little_endian(bytes, at, 8);
    EXPECT_EQ(little_endian(bytes, at + 8, 4), masked_crc32c(bytes.data() + at, 8));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(little_endian(bytes, at + 12 + length, 4), masked_crc32c(data.data(), data.size()));
    out.push_back(data);
    at += 12 + length + 4;
  }
  return out;
}

TEST(TensorBoardLogger, WritesEventsTensorBoardCanRead) {
  const auto root = arc::testing::process_scratch() / "tb";
  fs::remove_all(root);
  auto logger = std::make_shared<TensorBoardLogger>(root.string());
  testing::TinyModule module;
  Trainer trainer(testing::quiet().max_epochs(2).log_every_n_steps(2).num_sanity_val_steps(0), {}, {logger});
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(4, 2));
  ASSERT_EQ(fs::path(logger->events_path()).parent_path(), root / "lightning_logs" / "version_0");
  const auto payloads = records(logger->events_path());
  ASSERT_EQ(payloads.size(), 1u + 4u + 2u);
  tensorboard::Event header;
  ASSERT_TRUE(header.ParseFromString(payloads[0]));
  EXPECT_EQ(header.file_version(), "brain.Event:2");
  std::vector<int64_t> train_steps, val_steps;
  std::vector<float> epochs;
  float last_val = 0;
  for (size_t i = 1; i < payloads.size(); ++i) {
    tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString(payloads[i]));
    for (const auto& value : event.summary().value()) {
      EXPECT_TRUE(std::isfinite(value.simple_value()));
      if (value.tag() == "train_loss") train_steps.push_back(event.step());
      if (value.tag() == "val_loss") val_steps.push_back(event.step());
      if (value.tag() == "val_loss") last_val = value.simple_value();
      // Lightning logs the epoch as a scalar beside every record.
      if (value.tag() == "epoch") epochs.push_back(value.simple_value());
    }
  }
  // Lightning's steps: each logged batch's stepped batches before it; an epoch's validation at its
  // last batch's.
  EXPECT_EQ(train_steps, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(val_steps, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(epochs, (std::vector<float>{0, 0, 0, 1, 1, 1}));
  EXPECT_FLOAT_EQ(last_val, static_cast<float>(trainer.callback_metrics().at("val_loss")));
  fs::remove_all(root);
}

// The loggers as LightningCLI prints them, every init_arg: prefix names every metric
// "<prefix>-<name>" in all three files, sub_dir puts the events file in a folder of the version's,
// and the graph and hp_metric that Arclight does not write are said to be left out.
TEST(TensorBoardLogger, LightningCliPrintedLoggersTakePrefixAndSubDir) {
  const auto root = arc::testing::process_scratch() / "printed_loggers";
  fs::remove_all(root);
  const auto save_dir = nlohmann::json(root.string());
  const nlohmann::json printed = {{{"class_path", "lightning.pytorch.loggers.CSVLogger"},
                                   {"init_args",
                                    {{"save_dir", save_dir},
                                     {"name", "csv"},
                                     {"version", nullptr},
                                     {"prefix", "fold1"},
                                     {"flush_logs_every_n_steps", 100}}}},
                                  {{"class_path", "lightning.pytorch.loggers.TensorBoardLogger"},
                                   {"init_args",
                                    {{"save_dir", save_dir},
                                     {"name", "tb"},
                                     {"version", nullptr},
                                     {"log_graph", true},
                                     {"default_hp_metric", true},
                                     {"prefix", "fold1"},
                                     {"sub_dir", "train"}}}},
                                  {{"class_path", "JsonLinesLogger"},
                                   {"init_args", {{"save_dir", save_dir}, {"name", "jsonl"}, {"prefix", "fold1"}}}}};
  ::testing::internal::CaptureStderr();
  const auto loggers = loggers_from_json(printed, "trainer.logger");
  const auto warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("'trainer.logger[1].init_args.log_graph' is not used"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("'trainer.logger[1].init_args.default_hp_metric' is not used"), std::string::npos)
      << warnings;
  testing::TinyModule module;
  Trainer trainer(testing::quiet().max_epochs(1).log_every_n_steps(2).num_sanity_val_steps(0), {}, loggers);
  trainer.fit(module, testing::tiny_data(8, 2), testing::tiny_data(4, 2));

  std::ifstream csv(root / "csv" / "version_0" / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "fold1-epoch,fold1-train_loss,fold1-val_loss,step");
  std::ifstream jsonl(root / "jsonl" / "version_0" / "metrics.jsonl");
  std::string first;
  std::getline(jsonl, first);
  EXPECT_TRUE(nlohmann::json::parse(first).contains("fold1-train_loss")) << first;

  const auto& events = std::static_pointer_cast<TensorBoardLogger>(loggers[1])->events_path();
  EXPECT_EQ(fs::path(events).parent_path(), root / "tb" / "version_0" / "train");
  std::set<std::string> tags;
  const auto payloads = records(events);
  for (size_t i = 1; i < payloads.size(); ++i) {
    tensorboard::Event event;
    ASSERT_TRUE(event.ParseFromString(payloads[i]));
    for (const auto& value : event.summary().value()) tags.insert(value.tag());
  }
  EXPECT_EQ(tags, (std::set<std::string>{"fold1-epoch", "fold1-train_loss", "fold1-val_loss"}));
  fs::remove_all(root);
}

}  // namespace
}  // namespace arc
