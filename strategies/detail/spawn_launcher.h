// SpawnLauncher: ddp_spawn's process starter. It opens the rendezvous store on a free port, then
// re-executes this program (/proc/self/exe, same argv) once per extra rank with the rank
// variables set — no fork after LibTorch starts — and watches the children: one that fails
// ends the others, and rank 0's next wait for them fails with an arc::Error that names the rank
// and its error, which the program may catch (as Lightning's spawn raises a child's error in the
// caller).
#pragma once

#include <arc/strategies/detail/rank_processes.h>

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
  /// The launcher of this process, started on first use with `world_size` ranks. An error once a
  /// rank failed: the program cannot start its ranks again.
  static SpawnLauncher& launch(int64_t world_size, std::chrono::milliseconds timeout);

  ~SpawnLauncher();
  SpawnLauncher(const SpawnLauncher&) = delete;
  SpawnLauncher& operator=(const SpawnLauncher&) = delete;

  int64_t world_size() const { return world_size_; }
  int64_t port() const;
  c10::intrusive_ptr<c10d::TCPStore> store() const;
  /// The error of the rank that failed ("ddp_spawn: rank 1 failed: <its error>; ..."), waiting up
  /// to `wait` for a failure to be noticed; "" while none did. Once taken, rank 0 is to throw it.
  std::string take_failure(std::chrono::milliseconds wait = {});
  /// Called when rank 0's stage failed: ends every child now. A child that failed and was not
  /// named in rank 0's error yet is printed as the cause; otherwise rank 0 is, with `reason`.
  void abort(const std::string& reason);
  /// Waits, within the timeout, for the children that SIGINT stopped with this process (ending
  /// those overdue), so that none outlives it.
  void wait_interrupted();
  /// Marks that rank 0 is in Arclight's code that waits for the other ranks (set-up, a stage):
  /// after a child failed, such a wait ends with its error; one that has not within `patience`
  /// ends this process, naming the child. Exiting while busy ends the children at once.
  void set_busy(bool busy, std::chrono::milliseconds patience);
  /// Throws the error of a rank that failed outside rank 0's waits (a stage that ends well, or the
  /// next one, says it).
  void check();

 private:
  SpawnLauncher(int64_t world_size, std::chrono::milliseconds timeout);
  void spawn(int64_t rank);
  void watch();
  /// Reaps a failed child (under mutex_): records its error and stops the others.
  bool notice_failure();

  int64_t world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<StoreServer> server_;
  RankProcesses children_;
  std::mutex mutex_;
  /// The failure that ended the children, and whether rank 0 threw it already (under mutex_).
  std::string failure_;
  bool failure_taken_ = false;
  std::chrono::milliseconds patience_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> busy_{false};
  std::thread watcher_;
};

}  // namespace arc
