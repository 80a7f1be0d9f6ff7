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
}

TEST(Config, MissingRequiredKeyIsAnError) {
  Config config(nlohmann::json::object(), "data");
  EXPECT_NE(error_of([&] { config.require<std::string>("name"); }).find("missing config key 'data.name'"),
            std::string::npos);
}

}  // namespace
}  // namespace arc
