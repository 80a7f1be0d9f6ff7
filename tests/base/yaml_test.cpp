#include <arc/base/config.h>
#include <arc/base/detail/yaml.h>

#include "support/errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace arc {
namespace {

using testing::error_of;

// PyYAML's merge keys, as LightningCLI reads them: the mapping's own keys win over merged ones, and
// of several merged mappings the earlier one; a quoted "<<" is an ordinary key.
TEST(Yaml, MergeKeysAddTheAnchoredMappingsKeysThatAreNotGiven) {
  const auto value = from_yaml(
      "a: &a {x: 1, y: 2}\n"
      "b: &b {y: 20, z: 30}\n"
      "one: {<<: *a, y: 3}\n"
      "both:\n  <<: [*a, *b]\n  w: 0\n"
      "quoted: {\"<<\": 1}\n",
      "run.yaml");
  EXPECT_EQ(value["one"], nlohmann::json({{"x", 1}, {"y", 3}}));
  EXPECT_EQ(value["both"], nlohmann::json({{"w", 0}, {"x", 1}, {"y", 2}, {"z", 30}}));
  EXPECT_EQ(value["quoted"], nlohmann::json({{"<<", 1}}));
  EXPECT_EQ(error_of([] { from_yaml("trainer:\n  <<: 5\n", "run.yaml"); }),
            "run.yaml:2: trainer.<<: the merge key << takes a mapping or a list of mappings (<<: *defaults or <<: "
            "[*a, *b]), got a scalar");
}

// PyYAML's safe_load refuses a second document; keys after a --- are not left out silently.
TEST(Yaml, ASecondDocumentIsAnErrorNamingItsLine) {
  EXPECT_EQ(error_of([] { from_yaml("trainer: {max_epochs: 1}\n---\nmodule: {name: cnn_classifier}\n", "run.yaml"); }),
            "run.yaml:3: a second YAML document begins here (after ---); a config is one document: put its keys in "
            "the first, or give it its own --config");
  EXPECT_EQ(from_yaml("---\ntrainer: {max_epochs: 1}\n...\n", "run.yaml"),
            nlohmann::json({{"trainer", {{"max_epochs", 1}}}}));
  EXPECT_TRUE(from_yaml("# nothing\n", "run.yaml").is_null());
}

TEST(Yaml, TextThatIsNotUtf8IsAnErrorNamingItsLineAndByte) {
  EXPECT_EQ(error_of([] { from_yaml("trainer:\n  name: caf\xe9\n", "run.yaml"); }),
            "run.yaml:2: not UTF-8 text (byte 0xE9 at byte 20); write it in UTF-8");
  // A sequence cut short, an overlong encoding, a surrogate; and UTF-8 of every length is taken.
  for (const std::string bad : {"\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    EXPECT_NE(error_of([&] { check_utf8("a: " + bad, "run.yaml"); }).find("not UTF-8"), std::string::npos) << bad;
  EXPECT_EQ(from_yaml("a: \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"\n", "run.yaml")["a"],
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  nlohmann::json root = nlohmann::json::object();
  EXPECT_EQ(error_of([&] { set_dotted(root, "trainer.name", "caf\xe9"); }),
            "--set:1: not UTF-8 text (byte 0xE9 at byte 16); write it in UTF-8");
}

// yaml-cpp's own LoadAll never returns from a "," where a document's value begins.
TEST(Yaml, AValueBeginningWithAFlowIndicatorIsAnError) {
  for (const std::string text : {",", ",[", "]", "a: 1\n}", ", [x]", "a: 1\n,"})
    EXPECT_NE(error_of([&] { from_yaml(text, "run.yaml"); }).find("run.yaml:"), std::string::npos) << text;
  EXPECT_EQ(error_of([] { from_yaml(",[", "run.yaml"); }),
            "run.yaml:1: not valid YAML (a value cannot begin with ','); check its syntax");
}

TEST(Yaml, ANumberOutsideADoublesRangeIsAnError) {
  EXPECT_NE(
      error_of([] { from_yaml("module:\n  lr: 3e333\n", "run.yaml"); }).find("run.yaml:2: module.lr: 3e333 is outside"),
      std::string::npos);
  EXPECT_EQ(from_yaml("big: 123456789012345678901234567890\n", "run.yaml")["big"], 1.2345678901234568e29);
}

TEST(Yaml, ALineIndentedWithATabSaysSo) {
  const auto message = error_of([] { from_yaml("trainer:\n\tmax_epochs: 1\n", "run.yaml"); });
  EXPECT_EQ(message.rfind("run.yaml:2: not valid YAML (", 0), 0u) << message;
  EXPECT_NE(message.find("; YAML indents with spaces, and this line indents with a tab"), std::string::npos) << message;
  const auto other = error_of([] { from_yaml("trainer: [max_epochs: 1\n", "run.yaml"); });
  EXPECT_NE(other.find("check its syntax"), std::string::npos) << other;
}

}  // namespace
}  // namespace arc
