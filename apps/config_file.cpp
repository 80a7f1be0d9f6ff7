// The `arc` tool's config: a JSON file and --set overrides. No LibTorch here: the tool's launcher
// reads it too.
#include <arc/apps/cli.h>

#include <arc/base/config.h>
#include <arc/base/error.h>

#include <fstream>

namespace arc::cli {

nlohmann::json load_config(const std::string& config_path, const std::vector<std::string>& overrides) {
  // With no config, `arc train` trains mlp_classifier for one epoch.
  nlohmann::json config = {{"trainer", {{"max_epochs", 1}}}};
  if (!config_path.empty()) {
    std::ifstream in(config_path);
    ARC_CHECK(in.good(), "cannot read config file '", config_path, "'; check the path given to --config");
    const auto file = nlohmann::json::parse(in, nullptr, false);
    ARC_CHECK(!file.is_discarded(), "config file '", config_path, "' is not valid JSON; check its syntax");
    ARC_CHECK(file.is_object(), "config file '", config_path,
              "' must hold a JSON object with sections module, data and trainer");
    config.merge_patch(file);
  }
  for (const auto& item : overrides) {
    const auto equals = item.find('=');
    ARC_CHECK(equals != std::string::npos, "--set needs key=value, e.g. trainer.max_epochs=3, got '", item, "'");
    set_dotted(config, item.substr(0, equals), item.substr(equals + 1));
  }
  return config;
}

}  // namespace arc::cli
