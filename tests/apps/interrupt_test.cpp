// Ctrl-C as a user presses it: `arc train` runs on a terminal of its own, and the keystroke goes
// through the terminal driver to every process of the run. The first stops every rank at the
// next batch boundary, saves, says where and exits with 130; a second ends every rank at once.
#include "support/arc_tool.h"
#include "support/command.h"
#include "support/scratch.h"
#include "support/terminal.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>

namespace {

using arc::testing::read_file;
using arc::testing::shipped_config;
using arc::testing::Terminal;

std::vector<pid_t> children(pid_t pid) {
  std::istringstream list(read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  std::vector<pid_t> out;
  for (pid_t child; list >> child;) out.push_back(child);
  return out;
}

bool gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class Interrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (arc::testing::process_scratch() / "interrupt").string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `arc train` for many epochs on a terminal, once its training batches run (the progress bar
  // draws "Epoch 0:"), with the processes of its ranks.
  std::unique_ptr<Terminal> start(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {ARC_BINARY, "train",
                                     "--set",    "trainer.max_epochs=100",
                                     "--set",    "trainer.default_root_dir=" + dir_,
                                     "--set",    "trainer.strategy=DDPStrategy",
                                     "--set",    "trainer.strategy.timeout=60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto terminal = std::make_unique<Terminal>(argv);
    EXPECT_TRUE(terminal->wait_for("Epoch 0:", 120)) << terminal->output();
    ranks_ = children(terminal->pid());
    return terminal;
  }

  std::string saved() const { return dir_ + "/lightning_logs/version_0/checkpoints/on_exception.ckpt"; }

  void expect_saved_and_said(const Terminal& terminal) {
    const auto& output = terminal.output();
    EXPECT_NE(output.find("fit interrupted by SIGINT (Ctrl-C) at global step"), std::string::npos) << output;
    EXPECT_NE(output.find("saved '" + saved() + "'; resume with fit(..., ckpt_path="), std::string::npos) << output;
    EXPECT_TRUE(std::filesystem::exists(saved())) << output;
    for (const pid_t pid : ranks_) EXPECT_TRUE(gone(pid)) << "rank process " << pid << " was left running";
    EXPECT_EQ(output.find("[arc] error"), std::string::npos) << output;
  }

  std::string dir_;
  std::vector<pid_t> ranks_;
};

TEST_F(Interrupt, CtrlCStopsEveryDdpSpawnRankSavesAndExits130) {
  auto terminal = start({"--config", shipped_config()});
  ASSERT_EQ(ranks_.size(), 2u) << terminal->output();
  terminal->type("\x03");
  EXPECT_EQ(terminal->wait_exit(120), 130) << terminal->output();
  expect_saved_and_said(*terminal);
  // The saved state loads: one validation pass from it (its log folder in the test's own).
  const auto check =
      arc::testing::run_command(std::string(ARC_BINARY) + " validate --ckpt " + saved() +
                                " --set trainer.limit_val_batches=2 --set trainer.default_root_dir=" + dir_ +
                                " --set trainer.enable_progress_bar=false");
  EXPECT_EQ(check.status, 0) << check.output;
}

TEST_F(Interrupt, CtrlCStopsOneProcessSavesAndExits130) {
  auto terminal = start({"--set", "trainer.num_threads=1"});
  terminal->type("\x03");
  EXPECT_EQ(terminal->wait_exit(120), 130) << terminal->output();
  expect_saved_and_said(*terminal);
}

// Ctrl-C while the ranks start, before their fit can catch it, ends the run as an interruption
// (Lightning's KeyboardInterrupt during setup), not as a rank's failure: status 130, no error. On a
// machine slow enough that fit began first, the usual save is the right outcome too.
TEST_F(Interrupt, CtrlCWhileTheRanksStartEndsTheRunAsAnInterruption) {
  Terminal terminal({ARC_BINARY, "train", "--config", shipped_config(), "--set", "trainer.max_epochs=100", "--set",
                     "trainer.default_root_dir=" + dir_, "--set", "trainer.strategy=DDPStrategy", "--set",
                     "trainer.strategy.timeout=60"});
  // Once both ranks run the program itself (their environment is a rank's), not the launcher's copy.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    ranks_ = children(terminal.pid());
    const auto started = [](pid_t pid) {
      return read_file("/proc/" + std::to_string(pid) + "/environ").find("ARC_SPAWN_CHILD=") != std::string::npos;
    };
    if (ranks_.size() == 2 && std::all_of(ranks_.begin(), ranks_.end(), started)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(ranks_.size(), 2u) << terminal.output();
  terminal.type("\x03");
  EXPECT_EQ(terminal.wait_exit(120), 130) << terminal.output();
  const auto& output = terminal.output();
  EXPECT_EQ(output.find("error"), std::string::npos) << output;
  EXPECT_TRUE(output.find("interrupted by SIGINT (Ctrl-C) before training started; nothing was saved") !=
                  std::string::npos ||
              output.find("fit interrupted by SIGINT (Ctrl-C) at global step") != std::string::npos)
      << output;
  for (const pid_t pid : ranks_) EXPECT_TRUE(gone(pid)) << "rank process " << pid << " was left running";
}

// SIGINT sent to one rank, or to the launcher alone, stops every rank as Ctrl-C does.
TEST_F(Interrupt, SigintToOneRankOrToTheLauncherStopsEveryRank) {
  for (const bool to_rank : {true, false}) {
    std::filesystem::remove_all(dir_);
    auto terminal = start({"--config", shipped_config()});
    ASSERT_EQ(ranks_.size(), 2u) << terminal->output();
    kill(to_rank ? ranks_.back() : terminal->pid(), SIGINT);
    EXPECT_EQ(terminal->wait_exit(120), 130) << terminal->output();
    expect_saved_and_said(*terminal);
  }
}

// A rank that cannot reach the next batch boundary (stopped here with SIGSTOP) holds the others in
// the vote: the second Ctrl-C ends every rank at once.
TEST_F(Interrupt, SecondCtrlCEndsEveryRankAtOnce) {
  auto terminal = start({"--config", shipped_config()});
  ASSERT_EQ(ranks_.size(), 2u) << terminal->output();
  kill(ranks_.back(), SIGSTOP);
  terminal->type("\x03");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  terminal->type("\x03");
  EXPECT_EQ(terminal->wait_exit(30), 130) << terminal->output();
  EXPECT_NE(terminal->output().find("a second Ctrl-C (SIGINT): every rank was ended at once"), std::string::npos)
      << terminal->output();
  for (const pid_t pid : ranks_) EXPECT_TRUE(gone(pid)) << "rank process " << pid << " was left running";
}

}  // namespace
