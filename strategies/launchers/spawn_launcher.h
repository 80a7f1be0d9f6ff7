// SpawnLauncher: ddp_spawn's process starter. It opens the rendezvous store on a free port, then
// re-executes this program (/proc/self/exe, same argv) once per extra rank with the rank
// variables set — no fork after LibTorch starts — and watches the children: one that fails
// ends the others and the command, naming the rank and the cause.
#pragma once

#include <arc/strategies/launchers/rank_processes.h>

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class TCPStore;
}

namespace arc {

class StoreServer;

/// Starts and watches ranks 1..world_size-1; the launching process is rank 0.
class SpawnLauncher {
 public:
  /// Whether this process was started by a SpawnLauncher.
  static bool is_child();
  /// Under the `arc` tool's launcher, which starts every rank itself (ARC_SPAWN_PORT_FD is set):
  /// rank 0 opens the rendezvous store on a free port and passes the port through that pipe to the
  /// other ranks, which wait for it within `timeout`; every rank then has MASTER_PORT. Returns the
  /// store rank 0 hosts (null on other ranks, and without that launcher).
  static c10::intrusive_ptr<c10d::TCPStore> join_tool_launcher(std::chrono::milliseconds timeout);
  /// The launcher of this process, started on first use with `world_size` ranks.
  static SpawnLauncher& launch(int64_t world_size, std::chrono::milliseconds timeout);

  ~SpawnLauncher();
  SpawnLauncher(const SpawnLauncher&) = delete;
  SpawnLauncher& operator=(const SpawnLauncher&) = delete;

  int64_t world_size() const { return world_size_; }
  int64_t port() const;
  c10::intrusive_ptr<c10d::TCPStore> store() const;
  /// Ends every child now. A child that just died is named as the cause (rank 0's own error is
  /// then only its symptom); otherwise rank 0 is, with `reason`.
  void abort(const std::string& reason);
  /// Waits, within the timeout, for the children that SIGINT stopped with this process (ending
  /// those overdue), so that none outlives it.
  void wait_interrupted();
  /// Marks that a Trainer stage runs: exiting during one ends the children at once.
  void set_busy(bool busy) { busy_ = busy; }

 private:
  SpawnLauncher(int64_t world_size, std::chrono::milliseconds timeout);
  void spawn(int64_t rank);
  void watch();

  int64_t world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<StoreServer> server_;
  RankProcesses children_;
  std::mutex mutex_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> busy_{false};
  std::thread watcher_;
};

}  // namespace arc
