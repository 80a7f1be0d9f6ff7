// RankProcesses.
#include <arc/strategies/launchers/rank_processes.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

extern char** environ;

namespace arc {

std::vector<std::pair<std::string, std::string>> rank_variables(int64_t rank, int64_t world_size, int64_t port) {
  std::vector<std::pair<std::string, std::string>> variables = {{"RANK", std::to_string(rank)},
                                                                {"LOCAL_RANK", std::to_string(rank)},
                                                                {"WORLD_SIZE", std::to_string(world_size)},
                                                                {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
                                                                {"NODE_RANK", "0"},
                                                                {"MASTER_ADDR", "127.0.0.1"}};
  if (port > 0) variables.emplace_back("MASTER_PORT", std::to_string(port));
  return variables;
}

std::vector<std::string> rank_environment(int64_t rank, int64_t world_size, int64_t port,
                                          const std::vector<std::pair<std::string, std::string>>& extra) {
  auto own = rank_variables(rank, world_size, port);
  own.emplace_back(kSpawnChildVariable, "1");
  own.emplace_back(kSpawnParentVariable, std::to_string(getpid()));
  own.insert(own.end(), extra.begin(), extra.end());
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const std::string key = item.substr(0, item.find('='));
    bool replaced = key == "MASTER_PORT";
    for (const auto& [name, value] : own) replaced = replaced || key == name;
    if (!replaced) environment.push_back(item);
  }
  for (const auto& [name, value] : own) environment.push_back(name + "=" + value);
  return environment;
}

uint64_t global_seed() {
  if (cluster::env(kGlobalSeedVariable)) {
    const int64_t seed = cluster::env_int(kGlobalSeedVariable);
    ARC_CHECK(seed >= 0, "environment variable ", kGlobalSeedVariable, "=", seed,
              " is not a seed; use a non-negative integer, or unset it");
    return static_cast<uint64_t>(seed);
  }
  const uint64_t seed = std::random_device{}();
  setenv(kGlobalSeedVariable, std::to_string(seed).c_str(), 1);
  return seed;
}

void report_spawn_failure(const std::string& message) {
  std::fprintf(stderr, "[arc] error: ddp_spawn: %s\n", message.c_str());
  std::fflush(stderr);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

void RankProcesses::start(int64_t rank, const std::string& program, const std::vector<std::string>& argv,
                          const std::vector<std::string>& environment, const std::vector<int>& close_fds) {
  std::vector<char*> args, envp;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  for (const auto& item : environment) envp.push_back(const_cast<char*>(item.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const int fd : close_fds) posix_spawn_file_actions_addclose(&actions, fd);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ARC_CHECK(error == 0, "ddp_spawn could not start rank ", rank, " (", program, "): ", std::strerror(error),
            "; check the process limit (ulimit -u) and free memory, or lower devices");
  ranks_.emplace_back(rank, pid);
}

RankProcesses::Failure RankProcesses::reap_failed() {
  for (auto& [rank, pid] : ranks_) {
    if (pid <= 0) continue;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) continue;
    pid = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kInterruptedExitCode) {
      interrupted_ = true;
      continue;
    }
    return {rank, WIFEXITED(status) ? WEXITSTATUS(status) : 1,
            "rank " + std::to_string(rank) + " " + describe_exit(status)};
  }
  return {};
}

int64_t RankProcesses::running() const {
  int64_t count = 0;
  for (const auto& [rank, pid] : ranks_) count += pid > 0 ? 1 : 0;
  return count;
}

void RankProcesses::signal_all(int signal) {
  for (const auto& [rank, pid] : ranks_)
    if (pid > 0) kill(pid, signal);
}

void RankProcesses::stop_all() {
  signal_all(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& [rank, pid] : ranks_) {
    while (pid > 0 && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, nullptr, WNOHANG) == pid)
        pid = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
}

void RankProcesses::kill_all() {
  for (auto& [rank, pid] : ranks_) {
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

std::vector<std::string> RankProcesses::stop_overdue() {
  std::vector<std::string> lines;
  for (const auto& [rank, pid] : ranks_)
    if (pid > 0)
      lines.push_back("rank " + std::to_string(rank) + " did not finish within the timeout after another rank " +
                      "had; killing it (raise the trainer's timeout if it needs longer)");
  stop_all();
  return lines;
}

std::vector<std::string> RankProcesses::wait_all(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> failures;
  while (running() > 0) {
    if (const auto failure = reap_failed()) {
      failures.push_back(failure.description);
    } else if (std::chrono::steady_clock::now() > deadline) {
      for (auto& line : stop_overdue()) failures.push_back(std::move(line));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return failures;
}

}  // namespace arc
