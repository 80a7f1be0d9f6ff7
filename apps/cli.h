// The `arc` command line tool: train, validate, test and predict registered modules from a
// JSON config, and list what is registered.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace arc::cli {

/// Reads `config_path` (or {} when empty) and applies each "dotted.key=value" override.
nlohmann::json load_config(const std::string& config_path, const std::vector<std::string>& overrides);

/// Runs the command line; returns the exit status. Errors are printed, not thrown.
int run(int argc, char** argv);

}  // namespace arc::cli
