// The `arc` tool's launcher.
#include <arc/apps/tool_launcher.h>

#include <arc/apps/cli.h>
#include <arc/core/error.h>
#include <arc/strategies/rank_processes.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <thread>

namespace arc::cli {
namespace {

std::atomic<int> forwarded{0};

void remember(int signal) { forwarded = signal; }

}  // namespace

SpawnPlan spawn_plan(const std::vector<std::string>& args) {
  if (args.empty() || std::getenv(kSpawnChildVariable) != nullptr) return {};
  const std::string& command = args[0];
  if (command != "train" && command != "validate" && command != "test" && command != "predict") return {};
  std::string config_path;
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool has_value = i + 1 < args.size();
    if ((arg == "--config" || arg == "-c") && has_value) {
      config_path = args[++i];
    } else if ((arg == "--set" || arg == "-s") && has_value) {
      overrides.push_back(args[++i]);
    } else if ((arg == "--resume" || arg == "--ckpt") && has_value) {
      ++i;
    } else {
      return {};
    }
  }
  try {
    const auto config = load_config(config_path, overrides);
    const auto trainer = config.value("trainer", nlohmann::json::object());
    if (!trainer.is_object() || trainer.value("strategy", nlohmann::json()) != "ddp_spawn" ||
        trainer.value("num_nodes", nlohmann::json(1)) != 1)
      return {};
    // A count or a list of devices gives one rank each, on any accelerator; -1 and "auto" need
    // the engine to count the devices.
    const auto devices = trainer.value("devices", nlohmann::json());
    const int64_t world = devices.is_number_integer() ? devices.get<int64_t>()
                          : devices.is_array()        ? static_cast<int64_t>(devices.size())
                                                      : 0;
    const auto timeout = trainer.value("timeout", nlohmann::json(SpawnPlan().timeout_s));
    if (world < 2 || !timeout.is_number() || timeout <= 0) return {};
    return {world, timeout.get<double>()};
  } catch (const Error&) {
    return {};
  }
}

int run_ranks(const std::string& engine, const std::vector<std::string>& args, const SpawnPlan& plan) {
  const int64_t world = plan.world;
  // Rank 0 writes the port into the pipe; every other rank reads it from there.
  int port_pipe[2];
  ARC_CHECK(pipe(port_pipe) == 0, "cannot make a pipe for the rendezvous port: ", std::strerror(errno));
  // Ctrl-C reaches the ranks from the terminal itself; SIGTERM and SIGHUP (kill, timeout, a
  // scheduler) reach this process only, and are passed on.
  std::signal(SIGINT, SIG_IGN);
  for (const int signal : {SIGTERM, SIGHUP}) std::signal(signal, remember);
  std::vector<std::string> argv = {engine};
  argv.insert(argv.end(), args.begin(), args.end());
  RankProcesses ranks;
  for (int64_t rank = 0; rank < world; ++rank) {
    const int own_end = rank == 0 ? port_pipe[1] : port_pipe[0];
    const int other_end = rank == 0 ? port_pipe[0] : port_pipe[1];
    const auto environment = rank_environment(rank, world, 0, {{kSpawnPortPipeVariable, std::to_string(own_end)}});
    ranks.start(rank, engine, argv, environment, {other_end});
  }
  close(port_pipe[0]);
  close(port_pipe[1]);
  while (ranks.running() == world) {
    if (const int signal = forwarded.exchange(0)) ranks.signal_all(signal);
    int exit_code = 1;
    const std::string failure = ranks.reap_failed(&exit_code);
    if (!failure.empty()) {
      report_spawn_failure(failure + "; stopping the other ranks");
      ranks.stop_all();
      return exit_code;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // One rank finished: the others have the trainer's timeout to finish too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                               std::chrono::duration<double>(plan.timeout_s));
  const auto failures = ranks.wait_all(deadline);
  for (const auto& failure : failures) report_spawn_failure(failure);
  return failures.empty() ? 0 : 1;
}

}  // namespace arc::cli
