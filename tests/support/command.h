// Runs a shell command as a user would and keeps what it printed, its exit status and how long
// it took; reads the TIMING lines that the programs under test print, also from the files a
// background run writes (their RESULT and PROBE lines go through cli::read_report).
#pragma once

#include <arc/cli/config_file.h>

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace arc::testing {

struct CommandRun {
  /// The exit status, or -1 when a signal ended the command.
  int status = -1;
  std::string output;
  double seconds = 0;
};

/// Milliseconds since the Unix epoch: the clock of the TIMING lines, comparable across processes.
inline int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

/// The numbers on every "TIMING `what` ..." line of `output`, line by line.
inline std::vector<std::vector<int64_t>> timings(const std::string& output, const std::string& what) {
  std::vector<std::vector<int64_t>> out;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    const auto at = line.find("TIMING " + what + " ");
    if (at == std::string::npos) continue;
    std::istringstream numbers(line.substr(at + 8 + what.size()));
    std::vector<int64_t> values;
    for (int64_t value; numbers >> value;) values.push_back(value);
    out.push_back(values);
  }
  return out;
}

/// The pids of the processes whose /proc/<pid>/<file> (cmdline, environ) `matches`, called with the
/// file's text and the pid.
template <typename Match>
std::vector<int> pids_where(const std::string& file, Match matches) {
  std::vector<int> found;
  DIR* proc = opendir("/proc");
  while (dirent* entry = readdir(proc)) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + pid + "/" + file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (matches(text, pid)) found.push_back(std::stoi(pid));
  }
  closedir(proc);
  return found;
}

/// A tag for the processes a test starts (passed on their command lines, as ddp_probe's --tag), named
/// `name` and unique to this test process, for tagged_pids, count_tagged and kill_tagged.
inline std::string process_tag(const std::string& name) { return "tag_" + std::to_string(getpid()) + "_" + name; }

/// The pids of the processes whose command line holds `tag` (not counting a `timeout` wrapper).
inline std::vector<int> tagged_pids(const std::string& tag) {
  return pids_where("cmdline", [&](const std::string& cmdline, const std::string&) {
    return cmdline.find(tag) != std::string::npos && cmdline.rfind("timeout", 0) != 0;
  });
}

inline int count_tagged(const std::string& tag) { return static_cast<int>(tagged_pids(tag).size()); }

/// The processes `tag` names that are still alive after waiting up to `seconds` for them to end: a
/// launcher may return while its ranks are still on their way out.
inline int count_tagged_after(const std::string& tag, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (count_tagged(tag) > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return count_tagged(tag);
}

/// SIGKILL to every process `tag` names: what a failed test leaves is cleaned up by pid.
inline void kill_tagged(const std::string& tag) {
  for (const int pid : tagged_pids(tag)) kill(pid, SIGKILL);
}

/// How often `part` occurs in `text`.
inline int occurrences(const std::string& text, const std::string& part) {
  int found = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++found;
  return found;
}

/// The whole file, or "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Waits until the file at `path` contains `text`; false after `seconds`.
inline bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (read_file(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace arc::testing
