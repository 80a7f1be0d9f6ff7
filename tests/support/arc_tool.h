// Runs the `arc` tool (ARC_BINARY) as a user runs it, each time in a folder of its own unless told,
// and reads its RESULT line.
#pragma once

#include "support/command.h"
#include "support/scratch.h"

#include <arc/cli/config_file.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

namespace arc::testing {

/// Runs `arc <args>` in `dir`, where its default lightning_logs/ goes.
inline CommandRun arc_in(const std::filesystem::path& dir, const std::string& args) {
  std::filesystem::create_directories(dir);
  return run_command("cd " + dir.string() + " && " + ARC_BINARY + " " + args);
}

/// Runs `arc <args>` in a folder of its own, removed afterwards with what the run left there.
inline CommandRun arc(const std::string& args) {
  static int calls = 0;
  const auto dir =
      std::filesystem::temp_directory_path() / ("arc_cli_" + std::to_string(getpid()) + "_" + std::to_string(calls++));
  auto run = arc_in(dir, args);
  std::filesystem::remove_all(dir);
  return run;
}

/// The config that the README's first command trains with.
inline std::string shipped_config() { return std::string(ARC_SOURCE_DIR) + "/apps/configs/mlp_ddp_spawn.json"; }

inline nlohmann::json result_of(const std::string& output) { return cli::read_report(output, "RESULT"); }

/// Writes `content` to a file named `name` in the process's scratch folder; its path.
inline std::string write_config(const std::string& name, const std::string& content) {
  const auto path = process_scratch() / name;
  std::ofstream(path) << content;
  return path.string();
}

}  // namespace arc::testing
