// Runs a shell command as a user would and keeps what it printed, its exit status and how long
// it took; reads the one-line JSON reports (RESULT, PROBE) that the programs under test print.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <chrono>
#include <cstdio>
#include <string>

namespace arc::testing {

struct CommandRun {
  /// The exit status, or -1 when a signal ended the command.
  int status = -1;
  std::string output;
  double seconds = 0;
};

/// Runs `command` through the shell with stderr folded into the output.
inline CommandRun run_command(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  CommandRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int raw = pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

/// The JSON after the first "`tag` " in `output` ("RESULT", "PROBE"), or null when there is none.
inline nlohmann::json report_line(const std::string& output, const std::string& tag) {
  const auto at = output.find(tag + " ");
  if (at == std::string::npos) return nullptr;
  const auto begin = at + tag.size() + 1;
  return nlohmann::json::parse(output.substr(begin, output.find('\n', begin) - begin));
}

}  // namespace arc::testing
