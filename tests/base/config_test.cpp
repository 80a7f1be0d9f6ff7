#include <arc/base/config.h>

#include "support/errors.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

using testing::error_of;

TEST(Config, ReadsTypedValuesWithFallbacks) {
  Config config({{"hidden", 128}, {"lr", 0.5}, {"name", "x"}}, "module");
  EXPECT_EQ(config.get<int64_t>("hidden", 1), 128);
  EXPECT_DOUBLE_EQ(config.get<double>("lr", 0.1), 0.5);
  EXPECT_EQ(config.get<std::string>("name", ""), "x");
  EXPECT_EQ(config.get<int64_t>("absent", 9), 9);
  EXPECT_NO_THROW(config.finish());
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  Config config({{"hidden", "big"}}, "module");
  const auto message = error_of([&] { config.get<int64_t>("hidden", 1); });
  EXPECT_NE(message.find("'module.hidden' must be an integer, got \"big\""), std::string::npos) << message;
}

TEST(Config, UnknownKeySuggestsTheClosestKnownKey) {
  Config config({{"hiden", 3}}, "module");
  config.get<int64_t>("hidden", 1);
  const auto message = error_of([&] { config.finish(); });
  EXPECT_NE(message.find("unknown config key 'module.hiden'; did you mean 'hidden'?"), std::string::npos) << message;
}

TEST(Config, SetDottedParsesJsonOrKeepsText) {
  nlohmann::json root = nlohmann::json::object();
  set_dotted(root, "trainer.max_epochs", "3");
  set_dotted(root, "trainer.accelerator", "cpu");
  set_dotted(root, "trainer.devices", "[0,1]");
  EXPECT_EQ(root["trainer"]["max_epochs"], 3);
  EXPECT_EQ(root["trainer"]["accelerator"], "cpu");
  EXPECT_EQ(root["trainer"]["devices"], nlohmann::json::array({0, 1}));
  EXPECT_THROW(set_dotted(root, "trainer..x", "1"), Error);
  EXPECT_THROW(set_dotted(root, "trainer.max_epochs.deeper", "1"), Error);
  // As LightningCLI's flags, YAML's flow style where a value is not JSON; a filename template that
  // YAML would read as a key without a value stays text.
  set_dotted(root, "trainer.max_time", "{minutes: 1}");
  EXPECT_EQ(root["trainer"]["max_time"], nlohmann::json({{"minutes", 1}}));
  set_dotted(root, "scheduling", "{0: 2, 4: 1}");
  EXPECT_EQ(root["scheduling"], nlohmann::json({{"0", 2}, {"4", 1}}));
  set_dotted(root, "trainer.callbacks", "[{class_path: EarlyStopping, init_args: {monitor: val_loss}}]");
  EXPECT_EQ(root["trainer"]["callbacks"][0]["init_args"]["monitor"], "val_loss");
  for (const std::string text : {"{epoch}", "{epoch}-{val_loss:.2f}", "{epoch:02d}", "[unclosed"}) {
    set_dotted(root, "filename", text);
    EXPECT_EQ(root["filename"], text);
  }
}

// LightningCLI's forms for class entries: a class alone takes keys as init_args, a key goes to the
// init_args an entry has, and naming the entry's class again keeps them (another class does not).
TEST(Config, SetDottedTakesKeysOfAClassEntry) {
  nlohmann::json root = nlohmann::json::object();
  set_dotted(root, "optimizer", "Adam");
  set_dotted(root, "optimizer.lr", "0.01");
  EXPECT_EQ(root["optimizer"], nlohmann::json({{"class_path", "Adam"}, {"lr", 0.01}}));
  root["optimizer"] = {{"class_path", "torch.optim.AdamW"}, {"init_args", {{"lr", 0.002}}}};
  set_dotted(root, "optimizer", "AdamW");
  set_dotted(root, "optimizer.weight_decay", "0.1");
  EXPECT_EQ(root["optimizer"], nlohmann::json({{"class_path", "torch.optim.AdamW"},
                                               {"init_args", {{"lr", 0.002}, {"weight_decay", 0.1}}}}));
  set_dotted(root, "optimizer", "SGD");
  EXPECT_EQ(root["optimizer"], "SGD");
  root["module"] = {{"name", "mlp_classifier"}, {"hidden", 64}};
  set_dotted(root, "module", "mlp_classifier");
  EXPECT_EQ(root["module"]["hidden"], 64);
  // Below the top level a class name (a capital, or an import path) takes keys; other text stays text.
  set_dotted(root, "trainer.logger", "lightning.pytorch.loggers.CSVLogger");
  set_dotted(root, "trainer.logger.save_dir", "logs");
  EXPECT_EQ(root["trainer"]["logger"],
            nlohmann::json({{"class_path", "lightning.pytorch.loggers.CSVLogger"}, {"save_dir", "logs"}}));
  set_dotted(root, "trainer.accelerator", "cpu");
  EXPECT_THROW(set_dotted(root, "trainer.accelerator.x", "1"), Error);
}

// What `arc modules` prints of a class: the keys it read, with the defaults it fell back on.
TEST(Config, KeysWithDefaultsListWhatWasRead) {
  Config config({{"lr", 0.5}}, "module");
  config.get<int64_t>("hidden", 256);
  config.get<double>("lr", 0.05);
  config.get_optional<std::string>("tag");
  config.get<std::string>("act", "relu");
  EXPECT_THROW(config.require<std::string>("name"), Error);
  EXPECT_EQ(join(config.keys_with_defaults()), "act=\"relu\", hidden=256, lr=0.05, name (required), tag=null");
  // A survey goes on past a required key, so that the keys read after it are listed too.
  const auto survey = Config::survey("trainer.callbacks");
  EXPECT_EQ(survey.require<std::string>("monitor"), "");
  EXPECT_EQ(survey.require<double>("lr"), 0.0);
  survey.get<int64_t>("patience", 3);
  EXPECT_EQ(join(survey.keys_with_defaults()), "lr (required), monitor (required), patience=3");
}

TEST(Config, MissingRequiredKeyIsAnError) {
  Config config(nlohmann::json::object(), "data");
  EXPECT_NE(error_of([&] { config.require<std::string>("name"); }).find("missing config key 'data.name'"),
            std::string::npos);
}

// A key given twice in one JSON object is an error naming its path (nlohmann keeps the last value);
// the same key in different objects, or in the entries of a list, is not.
TEST(Config, ParseJsonNamesAKeyGivenTwiceByItsPath) {
  EXPECT_EQ(error_of([] {
              parse_json(R"({"trainer": {"callbacks": [{"class_path": "A"},
                            {"init_args": {"monitor": "val_loss", "mode": "min", "monitor": "val_acc"}}]}})",
                         "run.json");
            }),
            "run.json: trainer.callbacks[1].init_args.monitor: the key appears twice; keep one");
  EXPECT_EQ(error_of([] { parse_json(R"({"a": 1, "b": [[1, {"c": 2}], {"c": 3, "c": 4}]})", "run.json"); }),
            "run.json: b[1].c: the key appears twice; keep one");
  const auto value = parse_json(R"({"a": {"x": 1}, "b": [{"x": 2}, {"x": 3}], "x": [4]})", "run.json");
  EXPECT_EQ(value["b"][1]["x"], 3);
  EXPECT_EQ(value["x"][0], 4);
}

TEST(Config, ParseJsonSyntaxErrorsNameTheLineAndColumn) {
  const auto message = error_of(
      [] { parse_json("{\"trainer\": {\"max_epochs\": 1,\n  \"limit_train_batches\": 2\n  \"x\": 1}}", "run.json"); });
  EXPECT_EQ(message.rfind("config file 'run.json' is not valid JSON: parse error at line 3, column 5: ", 0), 0u)
      << message;
  EXPECT_NE(message.find("expected '}'; check its syntax"), std::string::npos) << message;
}

}  // namespace
}  // namespace arc
