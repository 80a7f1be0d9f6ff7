// SpawnLauncher.
#include <arc/strategies/launchers/spawn_launcher.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/launchers/rank_processes.h>
#include <arc/strategies/process_group.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>

namespace arc {
namespace {

// Rank 0 writes one 8-byte record per other rank; a write that small is atomic on a pipe, so each
// reader takes exactly one.
void send_port(int fd, int64_t port, int64_t readers) {
  for (int64_t i = 0; i < readers; ++i)
    ARC_CHECK(write(fd, &port, sizeof(port)) == static_cast<ssize_t>(sizeof(port)), "rank 0 could not pass the ",
              "rendezvous port to the other ranks (writing to ", kSpawnPortPipeVariable, "=", fd, ": ",
              std::strerror(errno), "); they have ended already: their errors are above");
}

int64_t receive_port(int fd, int64_t rank, std::chrono::milliseconds timeout) {
  pollfd ready{fd, POLLIN, 0};
  const int polled = poll(&ready, 1, static_cast<int>(timeout.count()));
  ARC_CHECK(polled > 0, "rank ", rank, " did not get the rendezvous port from rank 0 within ", timeout.count() / 1000.0,
            " s; rank 0 is stuck before it opens the store, or raise the trainer's timeout");
  int64_t port = 0;
  ARC_CHECK(read(fd, &port, sizeof(port)) == static_cast<ssize_t>(sizeof(port)),
            "rank 0 ended before it opened the rendezvous store; its error is above");
  return port;
}

std::vector<std::string> own_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

// A spawned child dies with its parent, so that no rank outlives a killed launcher.
void die_with_parent() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv(kSpawnParentVariable);
  if (parent != nullptr && getppid() != static_cast<pid_t>(std::atoll(parent))) std::_Exit(1);
}

}  // namespace

bool SpawnLauncher::is_child() {
  static const bool child = [] {
    const bool spawned = std::getenv(kSpawnChildVariable) != nullptr;
    if (spawned) die_with_parent();
    return spawned;
  }();
  return child;
}

c10::intrusive_ptr<c10d::TCPStore> SpawnLauncher::join_tool_launcher(std::chrono::milliseconds timeout) {
  // Once per program: every Trainer of it uses the same store.
  static std::unique_ptr<StoreServer> server;
  static bool joined = false;
  if (!joined && std::getenv(kSpawnPortPipeVariable) != nullptr) {
    const int fd = static_cast<int>(cluster::env_int(kSpawnPortPipeVariable));
    const int64_t rank = cluster::env_int("RANK");
    int64_t port = 0;
    if (rank == 0) {
      server = std::make_unique<StoreServer>("127.0.0.1", 0, timeout);
      port = server->port();
      send_port(fd, port, cluster::env_int("WORLD_SIZE") - 1);
    } else {
      port = receive_port(fd, rank, timeout);
    }
    close(fd);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    joined = true;
  }
  return server ? server->store() : c10::intrusive_ptr<c10d::TCPStore>();
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
  const auto environment = rank_environment(rank, world_size_, port(), {});
  std::lock_guard<std::mutex> lock(mutex_);
  children_.start(rank, "/proc/self/exe", own_argv(), environment);
}

// Polls the children; the first failure ends the others and this process.
void SpawnLauncher::watch() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    const auto failure = children_.reap_failed();
    if (!failure) continue;
    report_spawn_failure(failure.description + "; stopping the other ranks");
    children_.stop_all();
    std::fflush(stdout);
    std::_Exit(1);
  }
}

void SpawnLauncher::abort(const std::string& reason) {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  // A dead peer is the usual reason for rank 0's collective to fail: give it a moment to be reaped.
  std::string failure;
  for (int i = 0; i < 25 && failure.empty(); ++i) {
    failure = children_.reap_failed().description;
    if (failure.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  report_spawn_failure((failure.empty() ? "rank 0 failed (" + reason + ")" : failure) + "; stopping the other ranks");
  children_.stop_all();
  busy_ = false;
  if (!failure.empty()) {
    std::fflush(stdout);
    std::_Exit(1);
  }
}

void SpawnLauncher::wait_interrupted() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  busy_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& failure : children_.wait_all(std::chrono::steady_clock::now() + timeout_))
    report_spawn_failure(failure);
}

// At exit: the children finish the same program; wait for them, within the timeout.
SpawnLauncher::~SpawnLauncher() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (busy_) {
    // exit() was called inside fit: the other ranks wait in a collective for this one.
    report_spawn_failure("rank 0 exited during training; stopping the other ranks");
    children_.stop_all();
    std::fflush(stdout);
    std::_Exit(1);
  }
  const auto failures = children_.wait_all(std::chrono::steady_clock::now() + timeout_);
  for (const auto& failure : failures) report_spawn_failure(failure);
  if (!failures.empty()) std::_Exit(1);
}

}  // namespace arc
