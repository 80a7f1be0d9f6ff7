// RankProcesses.
#include <arc/strategies/detail/rank_processes.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
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

bool report_to_launcher(const std::string& kind, const std::string& message) {
  if (!cluster::env(kSpawnErrorPipeVariable)) return false;
  const int fd = static_cast<int>(cluster::env_int(kSpawnErrorPipeVariable));
  // The NUL ends the record: a reader takes the last whole one.
  const std::string record = kind + "\n" + message + '\0';
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd, record.data() + written, record.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

RankProcesses::~RankProcesses() {
  for (const auto& r : ranks_) close(r.report_fd);
}

void RankProcesses::start(int64_t rank, const std::string& program, const std::vector<std::string>& argv,
                          const std::vector<std::string>& environment, const std::vector<int>& close_fds) {
  int ends[2];
  ARC_CHECK(pipe2(ends, O_CLOEXEC) == 0, "cannot make a pipe for the errors of rank ", rank, ": ", std::strerror(errno),
            "; check the open file limit (ulimit -n)");
  fcntl(ends[0], F_SETFL, O_NONBLOCK);
  // Only this rank inherits the write end: it loses O_CLOEXEC until the rank started.
  fcntl(ends[1], F_SETFD, 0);
  const std::string report_variable = std::string(kSpawnErrorPipeVariable) + "=";
  std::vector<char*> args, envp;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  for (const auto& item : environment)
    if (item.rfind(report_variable, 0) != 0) envp.push_back(const_cast<char*>(item.c_str()));
  const std::string report_item = report_variable + std::to_string(ends[1]);
  envp.push_back(const_cast<char*>(report_item.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const int fd : close_fds) posix_spawn_file_actions_addclose(&actions, fd);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(ends[1]);
  if (error != 0) close(ends[0]);
  ARC_CHECK(error == 0, "ddp_spawn could not start rank ", rank, " (", program, "): ", std::strerror(error),
            "; check the process limit (ulimit -u) and free memory, or lower devices");
  ranks_.push_back({rank, pid, ends[0], "", 0});
}

RankProcesses::Failure RankProcesses::reap_failed() {
  for (auto& r : ranks_) {
    if (r.pid <= 0) continue;
    int status = 0;
    if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
    r.pid = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kInterruptedExitCode) {
      interrupted_ = true;
      continue;
    }
    return {r.rank, WIFEXITED(status) ? WEXITSTATUS(status) : 1, WIFSIGNALED(status) ? WTERMSIG(status) : 0,
            "rank " + std::to_string(r.rank) + " " + describe_exit(status)};
  }
  return {};
}

int64_t RankProcesses::running() const {
  int64_t count = 0;
  for (const auto& r : ranks_) count += r.pid > 0 ? 1 : 0;
  return count;
}

void RankProcesses::signal_all(int signal) {
  for (const auto& r : ranks_)
    if (r.pid > 0) kill(r.pid, signal);
}

void RankProcesses::stop_all() {
  signal_all(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& r : ranks_) {
    while (r.pid > 0 && std::chrono::steady_clock::now() < deadline) {
      if (waitpid(r.pid, nullptr, WNOHANG) == r.pid)
        r.pid = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  kill_all();
}

void RankProcesses::kill_all() {
  for (auto& r : ranks_) {
    if (r.pid <= 0) continue;
    kill(r.pid, SIGKILL);
    waitpid(r.pid, nullptr, 0);
    r.pid = -1;
  }
}

std::vector<std::string> RankProcesses::stop_overdue() {
  std::vector<std::string> lines;
  for (const auto& r : ranks_)
    if (r.pid > 0)
      lines.push_back("rank " + std::to_string(r.rank) + " did not finish within the timeout after another rank " +
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

void RankProcesses::read_reports() {
  char buffer[4096];
  for (auto& r : ranks_) {
    while (true) {
      const ssize_t n = ::read(r.report_fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (r.report.empty()) r.arrival = arrivals_++;
      r.report.append(buffer, static_cast<size_t>(n));
    }
  }
}

// The last record: "kind\nmessage", each ended by a NUL (a rank that died while writing leaves its
// record unended; a bare message is an error).
RankError RankProcesses::parse(const Rank& r) {
  std::string text = r.report;
  while (!text.empty() && text.back() == '\0') text.pop_back();
  if (text.empty()) return {r.rank, "", ""};
  const size_t start = text.rfind('\0');
  if (start != std::string::npos) text.erase(0, start + 1);
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return {r.rank, "error", text};
  return {r.rank, text.substr(0, newline), text.substr(newline + 1)};
}

RankError RankProcesses::report(int64_t rank) {
  read_reports();
  for (const auto& r : ranks_)
    if (r.rank == rank) return parse(r);
  return {rank, "", ""};
}

std::vector<RankError> RankProcesses::reports() {
  read_reports();
  std::vector<const Rank*> reported;
  for (const auto& r : ranks_)
    if (!parse(r).kind.empty()) reported.push_back(&r);
  std::stable_sort(reported.begin(), reported.end(),
                   [](const Rank* a, const Rank* b) { return a->arrival < b->arrival; });
  std::vector<RankError> out;
  for (const Rank* r : reported) out.push_back(parse(*r));
  return out;
}

}  // namespace arc
