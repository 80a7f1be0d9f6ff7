// The `arc` tool's launcher: which command lines it starts every rank for, and what happens to
// the ranks when one of them dies or the tool is told to stop.
#include <arc/cli/config_file.h>
#include <arc/apps/tool_launcher.h>
#include <arc/base/error.h>
#include <arc/strategies/detail/rank_processes.h>

#include "support/arc_tool.h"
#include "support/command.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace {

using arc::testing::read_file;
using arc::testing::run_command;
using arc::testing::shipped_config;
using arc::testing::wait_for_text;

int64_t spawn_world(const std::vector<std::string>& args) { return arc::cli::spawn_plan(args).world; }

TEST(ToolLauncher, StartsARankPerDeviceOnlyForDdpSpawnOnOneNode) {
  const auto config = shipped_config();
  EXPECT_EQ(spawn_world({"fit", "--trainer.devices", "2", "--trainer.strategy=ddp_spawn"}), 2);
  EXPECT_EQ(spawn_world({"fit", "-c", config, "--ckpt_path", "last"}), 2);
  EXPECT_EQ(spawn_world({"train", "--config", config}), 2);
  EXPECT_EQ(spawn_world({"validate", "-c", config, "-s", "trainer.devices=3", "--ckpt", "last"}), 3);
  EXPECT_EQ(arc::cli::spawn_plan({"train", "--config", config}).timeout_s, 1800);
  EXPECT_EQ(arc::cli::spawn_plan({"train", "--config", config, "--set",
                                  "trainer.strategy={class_path: ddp_spawn, init_args: {timeout: 2.5}}"})
                .timeout_s,
            2.5);
  // The flat key, an alias, too.
  EXPECT_EQ(arc::cli::spawn_plan({"train", "--config", config, "--set", "trainer.timeout=2.5"}).timeout_s, 2.5);
  // Everything else runs in the engine alone, which also reports bad command lines and configs.
  EXPECT_EQ(spawn_world({"train"}), 0);
  EXPECT_EQ(spawn_world({"modules"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.strategy=ddp"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.accelerator=auto"}), 2);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=[0,1,2]"}), 3);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=-1"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=auto"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.num_nodes=2"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=1"}), 0);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--help"}), 0);
  // strategy "auto" with several devices is ddp_spawn on this machine, as Lightning picks; "2" is a count.
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.strategy=auto"}), 2);
  EXPECT_EQ(spawn_world({"train", "--set", "trainer.devices=2"}), 2);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=\"3\""}), 3);
  EXPECT_EQ(spawn_world({"train", "--config", config, "--set", "trainer.devices=\"0,1\""}), 2);
  EXPECT_EQ(spawn_world({"train", "--config", "/nonexistent/run.json"}), 0);
  // Lightning's DDPStrategy starts the ranks itself where no launcher did (as ddp_spawn), with its timeout.
  EXPECT_EQ(spawn_world({"fit", "--trainer.devices=2", "--trainer.strategy=DDPStrategy",
                         "--trainer.strategy.start_method=spawn"}),
            2);
  EXPECT_EQ(arc::cli::spawn_plan({"fit", "--trainer.devices=2", "--trainer.strategy=DDPStrategy",
                                  "--trainer.strategy.start_method=spawn", "--trainer.strategy.timeout=0:00:42"})
                .timeout_s,
            42);
  EXPECT_EQ(spawn_world({"fit", "--trainer.devices=2", "--trainer.strategy=DDPStrategy"}), 2);
  EXPECT_EQ(spawn_world({"fit", "--trainer.devices=2", "--trainer.strategy=DDPStrategy",
                         "--trainer.strategy.find_unused_parameters=true", "--trainer.strategy.start_method=popen"}),
            2);
  EXPECT_EQ(spawn_world({"fit", "--trainer.devices=auto", "--trainer.strategy=SingleDeviceStrategy"}), 0);
  // A rank that the launcher started runs its own command line as one rank.
  setenv(arc::kSpawnChildVariable, "1", 1);
  EXPECT_EQ(spawn_world({"train", "--config", config}), 0);
  unsetenv(arc::kSpawnChildVariable);
}

// A long `arc train` under ddp_spawn in the background: its output, then "EXIT <status>", go to
// a file in a folder of its own.
class ToolLauncherRun : public ::testing::Test {
 protected:
  static constexpr double kTimeout = 60;

  void SetUp() override {
    dir_ = (arc::testing::process_scratch() / "tool").string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string command =
        std::string(ARC_BINARY) + " train --config " + shipped_config() +
        " --set trainer.max_epochs=100 --set trainer.enable_progress_bar=false" +
        " --set trainer.strategy=DDPStrategy --set trainer.strategy.timeout=" + std::to_string(kTimeout) +
        " --set trainer.default_root_dir=" + dir_;
    const auto started = run_command("(" + command + " > " + out() + " 2>&1; echo \"EXIT $?\" >> " + out() +
                                     ") > /dev/null 2>&1 & echo $!");
    shell_ = std::stoi(started.output);
    ASSERT_TRUE(wait_for_text(out(), "model summary", 60)) << read_file(out());
    tool_ = children(shell_).at(0);
    ranks_ = children(tool_);
    ASSERT_EQ(ranks_.size(), 2u) << read_file(out());
  }

  void TearDown() override {
    // SetUp may have failed before it found the tool; its ranks die with it.
    if (tool_ <= 0 && shell_ > 0 && !dead(shell_)) {
      const auto tools = children(shell_);
      if (!tools.empty()) tool_ = tools.front();
    }
    for (const pid_t pid : ranks_) kill(pid, SIGKILL);
    if (tool_ > 0) kill(tool_, SIGKILL);
    // A rank that SIGKILL reached may still write into dir_ until it is dead (a zombie or gone), and
    // the shell appends "EXIT <status>" to out() once the tool is dead: wait for all of them.
    std::vector<pid_t> writers = ranks_;
    writers.push_back(tool_);
    writers.push_back(shell_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (const pid_t pid : writers)
      while (pid > 0 && !dead(pid) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::filesystem::remove_all(dir_);
  }

  static std::vector<pid_t> children(pid_t pid) {
    std::istringstream list(read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
    std::vector<pid_t> out;
    for (pid_t child; list >> child;) out.push_back(child);
    return out;
  }

  // The rank a process of the tool is, from its RANK variable.
  static int rank_of(pid_t pid) {
    std::istringstream entries(read_file("/proc/" + std::to_string(pid) + "/environ"));
    for (std::string entry; std::getline(entries, entry, '\0');)
      if (entry.rfind("RANK=", 0) == 0) return std::stoi(entry.substr(5));
    return -1;
  }

  pid_t rank_pid(int rank) const {
    for (const pid_t pid : ranks_)
      if (rank_of(pid) == rank) return pid;
    return -1;
  }

  std::string out() const { return dir_ + "/out.txt"; }

  static bool gone(pid_t pid) { return kill(pid, 0) != 0; }

  // Gone, or a zombie: it runs no more.
  static bool dead(pid_t pid) {
    const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t end = stat.rfind(") ");
    return end == std::string::npos || stat.at(end + 2) == 'Z';
  }

  std::string dir_;
  pid_t shell_ = -1;
  pid_t tool_ = -1;
  std::vector<pid_t> ranks_;
};

class ToolLauncherKill : public ToolLauncherRun, public ::testing::WithParamInterface<int> {};

TEST_P(ToolLauncherKill, ARankKilledEndsTheOthersAndTheToolNamingIt) {
  const int rank = GetParam();
  const pid_t victim = rank_pid(rank);
  ASSERT_GT(victim, 0);
  const auto start = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  ASSERT_TRUE(wait_for_text(out(), "EXIT ", kTimeout)) << read_file(out());
  // The dead rank ends the run, not the timeout: half of it leaves a loaded machine a wide margin.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kTimeout / 2);
  const auto output = read_file(out());
  EXPECT_NE(output.find("ddp_spawn: rank " + std::to_string(rank) + " was killed by signal 9"), std::string::npos)
      << output;
  EXPECT_NE(output.find("EXIT 1"), std::string::npos) << output;
  for (const pid_t pid : ranks_) EXPECT_TRUE(gone(pid)) << "rank process " << pid << " was left behind";
}

INSTANTIATE_TEST_SUITE_P(Rank, ToolLauncherKill, ::testing::Values(0, 1),
                         [](const auto& info) { return "Rank" + std::to_string(info.param); });

// seed_everything: true takes one seed in every rank: the tool chooses it for them.
TEST_F(ToolLauncherRun, EveryRankInheritsTheSameGlobalSeed) {
  const auto seed_of = [](pid_t pid) {
    std::istringstream entries(read_file("/proc/" + std::to_string(pid) + "/environ"));
    for (std::string entry; std::getline(entries, entry, '\0');)
      if (entry.rfind(std::string(arc::kGlobalSeedVariable) + "=", 0) == 0) return entry;
    return std::string();
  };
  ASSERT_FALSE(seed_of(ranks_.at(0)).empty());
  EXPECT_EQ(seed_of(ranks_.at(0)), seed_of(ranks_.at(1)));
}

TEST_F(ToolLauncherRun, SigtermToTheToolReachesEveryRank) {
  // Until fit installs its handler, SIGTERM ends a rank as it ends any process: wait for the first
  // epoch's checkpoint, written well after that.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const std::string checkpoints = dir_ + "/lightning_logs/version_0/checkpoints";
  while (!std::filesystem::exists(checkpoints) || std::filesystem::is_empty(checkpoints)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_file(out());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(tool_, SIGTERM);
  ASSERT_TRUE(wait_for_text(out(), "EXIT ", 30)) << read_file(out());
  const auto output = read_file(out());
  EXPECT_NE(output.find("fit stopped by SIGTERM at global step"), std::string::npos) << output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/hpc_ckpt_1.ckpt")) << output;
  EXPECT_EQ(output.find("EXIT 0"), std::string::npos) << output;
  for (const pid_t pid : ranks_) EXPECT_TRUE(gone(pid)) << "rank process " << pid << " was left behind";
}

TEST(ToolLauncher, DottedFlagsBecomeOverrides) {
  using Args = std::vector<std::string>;
  EXPECT_EQ(arc::cli::with_dotted_flags({"fit", "--trainer.max_epochs=3", "--module.lr", "0.1", "--module.name=a=b",
                                         "--config", "run.v2.yaml", "--config=b.yaml", "-s", "data.batch_size=8"}),
            (Args{"fit", "--set", "trainer.max_epochs=3", "--set", "module.lr=0.1", "--set", "module.name=a=b",
                  "--config", "run.v2.yaml", "--config=b.yaml", "-s", "data.batch_size=8"}));
  EXPECT_THROW(arc::cli::with_dotted_flags({"fit", "--trainer.max_epochs", "--config", "a.yaml"}), arc::Error);
  // LightningCLI's flags of a whole top-level key; other undotted options stay as they were.
  EXPECT_EQ(arc::cli::with_dotted_flags({"fit", "--model=cnn_classifier", "--optimizer", "Adam", "--seed_everything=42",
                                         "--data", "canonical", "--lr_scheduler=StepLR", "--resume", "last"}),
            (Args{"fit", "--set", "model=cnn_classifier", "--set", "optimizer=Adam", "--set", "seed_everything=42",
                  "--set", "data=canonical", "--set", "lr_scheduler=StepLR", "--resume", "last"}));
  EXPECT_THROW(arc::cli::with_dotted_flags({"fit", "--optimizer", "--config", "a.yaml"}), arc::Error);
}

// Every rank fails on the same config error, and the tool prints it once and exits with its status,
// as one process does.
TEST(ToolLauncher, ARankConfigErrorEndsTheToolWithTheRankStatusAndOneMessage) {
  const std::vector<std::string> args = {"train",
                                         "--config",
                                         shipped_config(),
                                         "--set",
                                         "trainer.devices=[0,1]",
                                         "--set",
                                         "trainer.enable_progress_bar=false"};
  ASSERT_EQ(spawn_world(args), 2) << "the tool starts the ranks";
  std::string command = ARC_BINARY;
  for (const auto& arg : args) command += " " + arg;
  const auto run = run_command(command);
  EXPECT_EQ(run.status, 2) << run.output;
  const std::string error = "takes devices as a process count, not indices; write devices: 2";
  const size_t first = run.output.find(error);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(error, first + 1), std::string::npos) << "printed more than once: " << run.output;
  EXPECT_EQ(run.output.find("arc: error: "), run.output.rfind("arc: error: ")) << run.output;
}

// The tool's side of the error pipes, run with a stand-in engine beside a copy of the tool (the real
// engine fails alike on every rank): errors that differ are each printed once, naming the rank, the
// first to arrive first; a rank's later report replaces its earlier one (the engine's error, with
// the config file's name, replaces its Trainer's); a rank that ends without reporting gets the
// tool's own line.
TEST(ToolLauncher, DifferentRankErrorsArePrintedOnceEachTheCauseFirst) {
  const auto dir = arc::testing::process_scratch() / "tool_stand_in";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ARC_BINARY, dir / "arc");
  const auto run_with_engine = [&](const std::string& script) {
    std::ofstream(dir / "arc-engine") << "#!/bin/sh\n" << script;
    std::filesystem::permissions(dir / "arc-engine", std::filesystem::perms::owner_all);
    return run_command((dir / "arc").string() + " train --set trainer.devices=2 --set trainer.strategy=ddp_spawn");
  };
  const auto reported = run_with_engine(
      "if [ \"$RANK\" = 1 ]; then printf 'failed\\nfirst report\\000error\\nboom at step 7\\000' "
      ">&$ARC_SPAWN_ERROR_FD; "
      "exit 2; fi\n"
      "sleep 0.2; printf 'error\\nrank 1 left the group' >&$ARC_SPAWN_ERROR_FD; exit 1\n");
  EXPECT_EQ(reported.status, 2) << reported.output;
  const size_t cause = reported.output.find("arc: error: rank 1: boom at step 7");
  const size_t consequence = reported.output.find("arc: error: rank 0: rank 1 left the group");
  ASSERT_NE(cause, std::string::npos) << reported.output;
  ASSERT_NE(consequence, std::string::npos) << reported.output;
  EXPECT_LT(cause, consequence) << reported.output;
  EXPECT_EQ(reported.output.find("exited with code"), std::string::npos) << reported.output;
  EXPECT_EQ(reported.output.find("first report"), std::string::npos)
      << "a later report replaces it: " << reported.output;
  const auto silent = run_with_engine("if [ \"$RANK\" = 1 ]; then exit 3; fi\nexec sleep 60\n");
  EXPECT_EQ(silent.status, 3) << silent.output;
  EXPECT_NE(silent.output.find("ddp_spawn: rank 1 exited with code 3; stopping the other ranks"), std::string::npos)
      << silent.output;
  std::filesystem::remove_all(dir);
}

TEST(ToolLauncher, EachDistinctRankErrorIsOneLineNamingItsRanksUnlessEveryRankHadIt) {
  using arc::cli::rank_error_lines;
  using Lines = std::vector<std::string>;
  EXPECT_EQ(rank_error_lines({{0, "error", "bad key"}, {1, "error", "bad key"}}, 2), Lines{"arc: error: bad key"});
  EXPECT_EQ(rank_error_lines({{1, "error", "bad key"}}, 2), Lines{"arc: error: rank 1: bad key"});
  EXPECT_EQ(rank_error_lines({{0, "error", "peer gone"}, {1, "failed", "bad_alloc"}, {2, "error", "peer gone"}}, 3),
            (Lines{"arc: error: ranks 0, 2: peer gone", "arc: failed: rank 1: bad_alloc"}));
  EXPECT_EQ(rank_error_lines({{0, "error", "a"}, {1, "failed", "a"}}, 2),
            (Lines{"arc: error: rank 0: a", "arc: failed: rank 1: a"}));
  EXPECT_TRUE(rank_error_lines({}, 2).empty());
}

}  // namespace
