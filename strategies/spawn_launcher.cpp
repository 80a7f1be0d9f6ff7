// SpawnLauncher.
#include <arc/strategies/spawn_launcher.h>

#include <arc/core/error.h>
#include <arc/strategies/process_group.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstring>
#include <fstream>

extern char** environ;

namespace arc {
namespace {

constexpr const char* kChildFlag = "ARC_SPAWN_CHILD";

std::vector<std::string> own_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// Plain stdio: the launcher also reports from exit handlers, after spdlog's statics are gone.
void report(const std::string& message) {
  std::fprintf(stderr, "[arc] error: ddp_spawn: %s\n", message.c_str());
  std::fflush(stderr);
}

// A spawned child dies with its parent, so that no rank outlives a killed launcher.
void die_with_parent() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv("ARC_SPAWN_PARENT_PID");
  if (parent != nullptr && getppid() != static_cast<pid_t>(std::atoll(parent))) std::_Exit(1);
}

}  // namespace

bool SpawnLauncher::is_child() {
  static const bool child = [] {
    const bool spawned = std::getenv(kChildFlag) != nullptr;
    if (spawned) die_with_parent();
    return spawned;
  }();
  return child;
}

SpawnLauncher& SpawnLauncher::launch(int64_t world_size, std::chrono::milliseconds timeout) {
  static std::unique_ptr<SpawnLauncher> launcher;
  if (!launcher) launcher.reset(new SpawnLauncher(world_size, timeout));
  ARC_CHECK(launcher->world_size_ == world_size, "ddp_spawn already started ", launcher->world_size_,
            " processes in this program; every Trainer of one program must use the same devices (got ", world_size,
            ")");
  return *launcher;
}

SpawnLauncher::SpawnLauncher(int64_t world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout), server_(std::make_unique<StoreServer>("127.0.0.1", 0, timeout)) {
  for (int64_t rank = 1; rank < world_size; ++rank) spawn(rank);
  watcher_ = std::thread([this] { watch(); });
}

int64_t SpawnLauncher::port() const { return server_->port(); }

c10::intrusive_ptr<c10d::TCPStore> SpawnLauncher::store() const { return server_->store(); }

void SpawnLauncher::spawn(int64_t rank) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const std::string key = item.substr(0, item.find('='));
    if (key != "RANK" && key != "LOCAL_RANK" && key != "WORLD_SIZE" && key != "LOCAL_WORLD_SIZE" &&
        key != "MASTER_ADDR" && key != "MASTER_PORT" && key != "NODE_RANK")
      environment.push_back(item);
  }
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"RANK", std::to_string(rank)},
                                                        {"LOCAL_RANK", std::to_string(rank)},
                                                        {"WORLD_SIZE", std::to_string(world_size_)},
                                                        {"LOCAL_WORLD_SIZE", std::to_string(world_size_)},
                                                        {"NODE_RANK", "0"},
                                                        {"MASTER_ADDR", "127.0.0.1"},
                                                        {"MASTER_PORT", std::to_string(port())},
                                                        {kChildFlag, "1"},
                                                        {"ARC_SPAWN_PARENT_PID", std::to_string(getpid())}})
    environment.push_back(key + "=" + value);
  const auto args = own_argv();
  std::vector<char*> argv, envp;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& item : environment) envp.push_back(const_cast<char*>(item.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data());
  ARC_CHECK(error == 0, "ddp_spawn could not start rank ", rank, ": ", std::strerror(error),
            "; check the process limit (ulimit -u) and free memory, or lower devices");
  std::lock_guard<std::mutex> lock(mutex_);
  children_.push_back(pid);
}

std::string SpawnLauncher::reap_failed() {
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i] <= 0) continue;
    int status = 0;
    if (waitpid(children_[i], &status, WNOHANG) != children_[i]) continue;
    children_[i] = -1;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      return "rank " + std::to_string(i + 1) + " " + describe(status);
  }
  return "";
}

// Polls the children; the first failure ends the others and this process.
void SpawnLauncher::watch() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    const std::string failure = reap_failed();
    if (failure.empty()) continue;
    report(failure + "; stopping the other ranks");
    kill_children();
    std::fflush(stdout);
    std::_Exit(1);
  }
}

void SpawnLauncher::kill_children() {
  for (const pid_t pid : children_)
    if (pid > 0) kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (pid_t& pid : children_) {
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

void SpawnLauncher::abort(const std::string& reason) {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  // A dead peer is the usual reason for rank 0's collective to fail: give it a moment to be reaped.
  std::string failure;
  for (int i = 0; i < 25 && failure.empty(); ++i) {
    failure = reap_failed();
    if (failure.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  report((failure.empty() ? "rank 0 failed (" + reason + ")" : failure) + "; stopping the other ranks");
  kill_children();
  busy_ = false;
  if (!failure.empty()) {
    std::fflush(stdout);
    std::_Exit(1);
  }
}

// At exit: the children finish the same program; wait for them, within the timeout.
SpawnLauncher::~SpawnLauncher() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (busy_) {
    // exit() was called inside fit: the other ranks wait in a collective for this one.
    report("rank 0 exited during training; stopping the other ranks");
    kill_children();
    std::fflush(stdout);
    std::_Exit(1);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  bool failed = false;
  for (size_t i = 0; i < children_.size(); ++i) {
    while (children_[i] > 0) {
      int status = 0;
      if (waitpid(children_[i], &status, WNOHANG) == children_[i]) {
        children_[i] = -1;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          report("rank " + std::to_string(i + 1) + " " + describe(status));
          failed = true;
        }
      } else if (std::chrono::steady_clock::now() > deadline) {
        report("rank " + std::to_string(i + 1) + " did not finish within the timeout; killing it");
        failed = true;
        kill_children();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  if (failed) std::_Exit(1);
}

}  // namespace arc
