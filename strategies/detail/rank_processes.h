// RankProcesses: the rank processes a launcher started on this machine, and the rules both of
// Arclight's launchers follow (ddp_spawn's, inside a training program, and the `arc` tool's, which
// loads no LibTorch): one that fails ends the others, named by rank and cause. No LibTorch here.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// What a launcher tells the ranks it starts: that they are its children, its pid (they die with
/// it), the pipe that takes the rank's fatal error (report_to_launcher), and under the `arc` tool
/// the pipe that carries rank 0's store port.
constexpr const char* kSpawnChildVariable = "ARC_SPAWN_CHILD";
constexpr const char* kSpawnParentVariable = "ARC_SPAWN_PARENT_PID";
constexpr const char* kSpawnPortPipeVariable = "ARC_SPAWN_PORT_FD";
constexpr const char* kSpawnErrorPipeVariable = "ARC_SPAWN_ERROR_FD";
/// The seed that a config's `seed_everything: true` takes (as Lightning's PL_GLOBAL_SEED): the first
/// process to need one chooses it and sets it here, so that the ranks it starts inherit it; the `arc`
/// tool chooses it for its ranks.
constexpr const char* kGlobalSeedVariable = "ARC_GLOBAL_SEED";
/// The run's seed for `seed_everything: true`: kGlobalSeedVariable when set (an error naming it when
/// it is not a non-negative integer), else one chosen now and set there.
uint64_t global_seed();

/// The exit status of a rank whose fit SIGINT (Ctrl-C) stopped, as every rank does together.
constexpr int kInterruptedExitCode = 130;

/// The variables of `rank` of `world_size` on one node (MASTER_PORT only when `port` > 0): what a
/// launcher gives each child, and what ddp_spawn's rank 0 sets for itself.
std::vector<std::pair<std::string, std::string>> rank_variables(int64_t rank, int64_t world_size, int64_t port);

/// This process's environment without the rank variables of any launcher, plus those of `rank`
/// of `world_size` on one node (MASTER_PORT only when `port` > 0), the child marker and this
/// process's pid as the parent's, and `extra`.
std::vector<std::string> rank_environment(int64_t rank, int64_t world_size, int64_t port,
                                          const std::vector<std::pair<std::string, std::string>>& extra);

/// Prints "[arc] error: ddp_spawn: <message>" with plain stdio: launchers also report from exit
/// handlers, after spdlog's statics are gone.
void report_spawn_failure(const std::string& message);

/// "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe_exit(int status);

/// Hands this rank's fatal error to the launcher that started it (through kSpawnErrorPipeVariable):
/// `kind` ("error", "failed") and `message`, as one record; a later record replaces an earlier one
/// (a program may add what it knows to the error its Trainer reported). False when no launcher
/// takes it (none started this process, or the pipe is gone).
bool report_to_launcher(const std::string& kind, const std::string& message);

/// The fatal error a rank reported (report_to_launcher).
struct RankError {
  int64_t rank = 0;
  std::string kind;
  std::string message;
};

class RankProcesses {
 public:
  RankProcesses() = default;
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  /// Starts `program` with `argv` and `environment` as `rank`, with a pipe for its error report
  /// (kSpawnErrorPipeVariable); `close_fds` are closed in it.
  void start(int64_t rank, const std::string& program, const std::vector<std::string>& argv,
             const std::vector<std::string>& environment, const std::vector<int>& close_fds = {});
  /// A rank that failed: which, its exit code (1 for a rank that a signal ended), the signal that
  /// ended it (0: none) and "rank N <cause>".
  struct Failure {
    int64_t rank = -1;
    int exit_code = 0;
    int signal = 0;
    std::string description;
    explicit operator bool() const { return rank >= 0; }
  };
  /// Reaps ranks that ended; the first that failed, else an empty Failure. A rank that ended with
  /// kInterruptedExitCode did not fail: it stopped with the others (interrupted()).
  Failure reap_failed();
  /// Whether a rank ended with kInterruptedExitCode.
  bool interrupted() const { return interrupted_; }
  /// How many ranks have not ended (or not been reaped) yet.
  int64_t running() const;
  /// Sends `signal` to every running rank.
  void signal_all(int signal);
  /// SIGTERM to every running rank, SIGKILL to those still there 2 s later; reaps them all.
  void stop_all();
  /// SIGKILL to every running rank; reaps them all.
  void kill_all();
  /// A line per rank still running, which stop_all() then ends: ranks overdue after another one
  /// finished.
  std::vector<std::string> stop_overdue();
  /// Waits until every rank ended or `deadline`; returns a line per failed or overdue rank (the
  /// overdue are stopped).
  std::vector<std::string> wait_all(std::chrono::steady_clock::time_point deadline);
  /// Reads what the ranks reported so far; the reports' order is the order in which this reads them
  /// (report() and reports() read too).
  void read_reports();
  /// The error that `rank` reported so far, if any (kind empty: none).
  RankError report(int64_t rank);
  /// Every error reported so far, the first to arrive first (the cause before its consequences).
  std::vector<RankError> reports();

 private:
  struct Rank {
    int64_t rank;
    pid_t pid;           // -1 once reaped
    int report_fd;       // the read end of its error pipe
    std::string report;  // what it wrote there so far
    int64_t arrival;     // the order in which the first bytes of the ranks' reports were read
  };
  static RankError parse(const Rank& rank);

  std::vector<Rank> ranks_;
  bool interrupted_ = false;
  int64_t arrivals_ = 0;
};

}  // namespace arc
