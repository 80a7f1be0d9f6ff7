// The `arc` tool's launcher.
#include <arc/apps/tool_launcher.h>

#include <arc/cli/config_file.h>
#include <arc/base/devices.h>
#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/detail/lightning_strategy.h>
#include <arc/strategies/detail/rank_processes.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

namespace arc::cli {
namespace {

std::atomic<int> forwarded{0};
std::atomic<int> interrupts{0};
std::atomic<bool> interrupt_to_forward{false};

void remember(int signal) { forwarded = signal; }

// Ctrl-C reaches every rank from the terminal itself (they share its process group); SIGINT that a
// process sent (kill, si_code <= 0) reached this process only, and is passed on.
void on_interrupt(int, siginfo_t* info, void*) {
  ++interrupts;
  if (info->si_code <= 0) interrupt_to_forward = true;
}

void catch_interrupts() {
  struct sigaction action {};
  action.sa_sigaction = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
}

// Waits for the ranks as run_ranks says; returns the tool's exit status.
int supervise(RankProcesses& ranks, const SpawnPlan& plan) {
  // Once one rank finished, the others have the trainer's timeout to finish too.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // The first SIGINT stops every rank at the next batch boundary; a second ends them at once (the
  // ranks that got it from the terminal may have died of it already).
  const auto ended_at_once = [&ranks] {
    ranks.kill_all();
    report_spawn_failure("a second Ctrl-C (SIGINT): every rank was ended at once, without saving");
    return kInterruptedExitCode;
  };
  while (ranks.running() > 0) {
    if (interrupts >= 2) return ended_at_once();
    if (interrupt_to_forward.exchange(false)) ranks.signal_all(SIGINT);
    if (const int signal = forwarded.exchange(0)) ranks.signal_all(signal);
    const auto failure = ranks.reap_failed();
    if (failure && interrupts >= 2) return ended_at_once();
    if (failure && interrupts >= 1 && failure.signal == SIGINT) {
      // Ctrl-C came before the rank's fit could catch it (while it started, set up or checked
      // validation): an interruption, as Lightning's KeyboardInterrupt there, not a failure.
      ranks.stop_all();
      std::fprintf(stderr, "[arc] info: interrupted by SIGINT (Ctrl-C) before training started; nothing was saved\n");
      return kInterruptedExitCode;
    }
    if (failure) {
      if (!ranks.report(failure.rank).kind.empty()) {
        // It said why; the others likely end by themselves with the same error (a config error).
        const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        while (ranks.running() > 0 && std::chrono::steady_clock::now() < grace) {
          ranks.reap_failed();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } else {
        report_spawn_failure(failure.description + "; stopping the other ranks");
      }
      ranks.stop_all();
      return failure.exit_code;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!deadline && ranks.running() < plan.world)
      deadline =
          now + std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(plan.timeout_s));
    if (deadline && now > *deadline) {
      for (const auto& line : ranks.stop_overdue()) report_spawn_failure(line);
      return 1;
    }
    ranks.read_reports();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ranks.interrupted() ? kInterruptedExitCode : 0;
}

}  // namespace

std::vector<std::string> rank_error_lines(const std::vector<RankError>& errors, int64_t world) {
  // Distinct errors in the order of the first rank that reported each, with the ranks that did.
  std::vector<std::pair<const RankError*, std::vector<int64_t>>> distinct;
  for (const auto& error : errors) {
    auto same = std::find_if(distinct.begin(), distinct.end(), [&](const auto& entry) {
      return entry.first->kind == error.kind && entry.first->message == error.message;
    });
    if (same == distinct.end()) same = distinct.emplace(distinct.end(), &error, std::vector<int64_t>());
    same->second.push_back(error.rank);
  }
  std::vector<std::string> lines;
  for (const auto& [error, ranks] : distinct) {
    std::string who;
    if (distinct.size() > 1 || static_cast<int64_t>(ranks.size()) < world) {
      who = ranks.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < ranks.size(); ++i) who += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
      who += ": ";
    }
    lines.push_back("arc: " + error->kind + ": " + who + error->message);
  }
  return lines;
}

SpawnPlan spawn_plan(const std::vector<std::string>& command_line) {
  if (command_line.empty() || std::getenv(kSpawnChildVariable) != nullptr) return {};
  const auto args = with_dotted_flags(command_line);
  const std::string& command = args[0];
  if (command != "fit" && command != "train" && command != "validate" && command != "test" && command != "predict")
    return {};
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const bool has_value = i + 1 < args.size();
    if ((arg == "--config" || arg == "-c") && has_value) {
      config_paths.push_back(args[++i]);
    } else if ((arg == "--set" || arg == "-s") && has_value) {
      overrides.push_back(args[++i]);
    } else if ((arg == "--resume" || arg == "--ckpt" || arg == "--ckpt_path") && has_value) {
      ++i;
    } else {
      return {};
    }
  }
  try {
    const auto config = load_config(config_paths, overrides).config;
    auto trainer = config.value("trainer", nlohmann::json::object());
    if (!trainer.is_object()) return {};
    // A strategy class stands for the options it sets (the engine checks that they agree).
    if (const auto strategy = trainer.find("strategy"); strategy != trainer.end() && is_strategy_class(*strategy))
      trainer.update(strategy_class_options(*strategy, "trainer.strategy"));
    // A count or a list of devices gives one rank each, on any accelerator; -1 and "auto" need
    // the engine to count the devices.
    const int64_t world =
        Devices::from_json(trainer.value("devices", nlohmann::json("auto")), "trainer.devices").known_count();
    const auto num_nodes = trainer.value("num_nodes", nlohmann::json(1));
    const auto given = trainer.value("strategy", nlohmann::json("auto"));
    const nlohmann::json strategy =
        given.is_string() ? nlohmann::json(cluster::parse_strategy_name(given.get<std::string>()).name) : given;
    if (num_nodes != 1 || world < 2) return {};
    // fsdp runs as ddp_spawn does where it starts its ranks itself.
    const bool spawns = strategy == "auto" || strategy == "fsdp";
    if (strategy != "ddp_spawn" && (!spawns || cluster::auto_strategy(world, 1) != "ddp_spawn")) return {};
    const auto timeout = trainer.value("timeout", nlohmann::json(SpawnPlan().timeout_s));
    if (!timeout.is_number() || timeout <= 0) return {};
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
  // SIGTERM and SIGHUP (kill, timeout, a scheduler) reach this process only, and are passed on.
  catch_interrupts();
  for (const int signal : {SIGTERM, SIGHUP}) std::signal(signal, remember);
  std::vector<std::string> argv = {engine};
  argv.insert(argv.end(), args.begin(), args.end());
  // One seed for every rank, should the config say seed_everything: true.
  global_seed();
  RankProcesses ranks;
  for (int64_t rank = 0; rank < world; ++rank) {
    const int own_end = rank == 0 ? port_pipe[1] : port_pipe[0];
    const int other_end = rank == 0 ? port_pipe[0] : port_pipe[1];
    const auto environment = rank_environment(rank, world, 0, {{kSpawnPortPipeVariable, std::to_string(own_end)}});
    ranks.start(rank, engine, argv, environment, {other_end});
  }
  close(port_pipe[0]);
  close(port_pipe[1]);
  const int exit_code = supervise(ranks, plan);
  for (const auto& line : rank_error_lines(ranks.reports(), world)) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  return exit_code;
}

}  // namespace arc::cli
