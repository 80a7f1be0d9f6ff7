// SpawnLauncher.
#include <arc/strategies/detail/spawn_launcher.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/detail/process_group.h>
#include <arc/strategies/detail/rank_processes.h>

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
  std::lock_guard<std::mutex> lock(launcher->mutex_);
  launcher->notice_failure();
  ARC_CHECK(launcher->failure_.empty(), "ddp_spawn cannot start its ranks again in this program: ", launcher->failure_,
            "; a program's ddp_spawn ranks run until one fails: run the program again");
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

// A rank whose stage failed reports its error and may go on running the program (a catch in
// main): the report is its failure. A rank may also die without one.
bool SpawnLauncher::notice_failure() {
  if (!failure_.empty()) return true;
  const auto died = children_.reap_failed();
  const auto reports = children_.reports();
  if (reports.empty() && !died) return false;
  failure_ =
      reports.empty() ? died.description : "rank " + std::to_string(reports[0].rank) + " failed: " + reports[0].message;
  children_.stop_all();
  failure_ += world_size_ > 2 ? "; the other ranks were stopped" : "";
  return true;
}

std::string SpawnLauncher::take_failure(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!notice_failure() && std::chrono::steady_clock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.lock();
  }
  if (failure_.empty()) return "";
  failure_taken_ = true;
  return "ddp_spawn: " + failure_;
}

void SpawnLauncher::set_busy(bool busy, std::chrono::milliseconds patience) {
  std::lock_guard<std::mutex> lock(mutex_);
  busy_ = busy;
  patience_ = patience;
}

void SpawnLauncher::check() {
  const auto failure = take_failure();
  if (!failure.empty()) throw Error(failure);
}

// Polls the children. A failure ends the others and is rank 0's to throw when it next waits for
// them; one that rank 0 does not notice within its patience ends this process, as a peer's timeout
// would have.
void SpawnLauncher::watch() {
  constexpr auto kNotWaiting = std::chrono::steady_clock::time_point::max();
  auto give_up = kNotWaiting;
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    if (!notice_failure() || failure_taken_ || !busy_) {
      give_up = kNotWaiting;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (give_up == kNotWaiting) give_up = now + patience_;
    if (now < give_up) continue;
    report_spawn_failure(detail::str(failure_, "; rank 0 did not get to a wait for the other ranks within ",
                                     "collective_timeout (", patience_.count() / 1000.0,
                                     " s) after it, so it ends too"));
    std::fflush(stdout);
    std::_Exit(1);
  }
}

void SpawnLauncher::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A dead peer is the usual reason for rank 0's stage to fail: give it a moment to be reaped.
  for (int i = 0; i < 25 && !notice_failure(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  busy_ = false;
  if (failure_.empty()) {
    report_spawn_failure("rank 0 failed (" + reason + "); stopping the other ranks");
    children_.stop_all();
    failure_ = "rank 0 failed (" + reason + ")";
  } else if (!failure_taken_ && failure_.find(reason) == std::string::npos) {
    // Rank 0's error does not say it: its own failure came first, or has another cause (the same
    // error on every rank, as a collective's check gives, is said once by rank 0).
    report_spawn_failure(failure_);
  }
  failure_taken_ = true;
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
  notice_failure();
  if (failure_taken_) return;
  if (!failure_.empty()) {
    // It failed while rank 0 did not wait for it (after its last stage): the program fails with it.
    report_spawn_failure(failure_);
    std::fflush(stdout);
    std::_Exit(1);
  }
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
