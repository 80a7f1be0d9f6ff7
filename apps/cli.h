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

/// The JSON on the first "<tag> {...}" line of `output` (rank 0's "RESULT" line of `arc` and of the
/// example programs), or null when there is none: the one reader of those lines, for tests and benchmarks.
inline nlohmann::json read_report(const std::string& output, const std::string& tag = "RESULT") {
  const auto at = output.find(tag + " ");
  if (at == std::string::npos) return nullptr;
  const auto begin = at + tag.size() + 1;
  return nlohmann::json::parse(output.substr(begin, output.find('\n', begin) - begin));
}

}  // namespace arc::cli
