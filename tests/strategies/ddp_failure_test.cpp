// DDP failures: a rank that throws, exits or is killed, a stuck rank, a missing rank, a spike on one
// rank, devices that cannot be had; each ends every rank soon and names the cause.
#include "strategies/ddp_support.h"
#include "support/ports.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace {

using namespace arc::testing::ddp;
using arc::testing::count_tagged;
using arc::testing::free_port;

// SpikeDetection: a spike that rank 1 alone sees ends every rank at that batch, rank 0 too with the
// spike's own error (not as a failed rank's), and rank 0 lists the batches to skip.
TEST(DDP, ASpikeOnOneRankEndsEveryRankAtThatBatch) {
  const std::string root = scratch_path("spike");
  std::filesystem::remove_all(root);
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 20 --spike.rank 1 --spike.batch 5 --root " + root);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("probe: error: Training spike detected in batch 5 of epoch 0 (SpikeDetection)"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("rank 1 failed"), std::string::npos) << run.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(root + "/skip_batches.json")), nlohmann::json({4, 5}));
  std::filesystem::remove_all(root);
}

// A rank stuck for 20 s in one step: with collective_timeout 1 s (timeout 60 s) the run fails within
// seconds, the error naming collective_timeout and where each rank was, through shared memory and
// through Gloo.
TEST(DDP, AStuckRankFailsTheRunAfterCollectiveTimeoutNotTimeout) {
  for (const std::string shared_memory : {"1", "0"}) {
    SCOPED_TRACE("shared memory " + shared_memory);
    const auto start = std::chrono::steady_clock::now();
    const auto stuck = probe(
        "--strategy ddp_spawn --devices 2 --steps 10 --timeout 60 --collective-timeout 1 "
        "--stall.rank 1 --stall.step 3 --stall.ms 20000 --shared-memory " +
        shared_memory);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    EXPECT_NE(stuck.status, 0);
    EXPECT_NE(stuck.output.find("collective_timeout"), std::string::npos) << stuck.output;
    // Where each rank was: rank 0 in the sync of step 3's values logged with sync_dist, rank 1 in its
    // own work.
    EXPECT_NE(stuck.output.find("rank 0: waits in all_gather #"), std::string::npos) << stuck.output;
    EXPECT_NE(stuck.output.find("(metric sync, "), std::string::npos) << stuck.output;
    EXPECT_NE(stuck.output.find("(gradient bucket 0, "), std::string::npos) << stuck.output;
    EXPECT_NE(stuck.output.find("rank 1: in no collective for "), std::string::npos) << stuck.output;
    EXPECT_NE(stuck.output.find("last completed all_reduce #"), std::string::npos) << stuck.output;
    // Ended by the 1 s collective_timeout, long before the stall (20 s) or the timeout (60 s) ran out.
    EXPECT_LT(took.count(), 15.0) << stuck.output;
  }
}

std::mt19937& random_engine() {
  static std::mt19937 engine(std::random_device{}());
  return engine;
}

struct Failure {
  std::string kind;
  std::string cause;  // what the output says when rank 1 fails
  int rank0_status;   // the command's status when rank 0 fails (the shell reports signals)
};

void PrintTo(const Failure& failure, std::ostream* out) { *out << failure.kind; }

class LauncherFailure : public ::testing::TestWithParam<std::tuple<Failure, int>> {};

TEST_P(LauncherFailure, EndsEveryRankQuicklyAndNamesTheCause) {
  const auto& [failure, rank] = GetParam();
  const std::string tag = arc::testing::process_tag(failure.kind + std::to_string(rank));
  const int step = std::uniform_int_distribution<int>(1, 30)(random_engine());
  const double timeout = 60;
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 200 --timeout " + std::to_string(timeout) +
                         " --fail.kind " + failure.kind + " --fail.rank " + std::to_string(rank) + " --fail.step " +
                         std::to_string(step) + " --tag " + tag);
  EXPECT_NE(run.status, 0) << run.output;
  // The failure ends the run, not the timeout: half of it leaves a loaded machine a wide margin.
  EXPECT_LT(run.seconds, timeout / 2) << run.output;
  if (rank == 1) {
    // Rank 0's fit threw it, and the program's own catch printed it (as Lightning's spawn raises a
    // child's error in the caller).
    EXPECT_NE(run.output.find("probe: error: ddp_spawn: rank 1 " + failure.cause), std::string::npos) << run.output;
    EXPECT_EQ(run.status, 1) << run.output;
  } else {
    EXPECT_EQ(run.status, failure.rank0_status) << run.output;
  }
  if (failure.kind == "exception") {
    EXPECT_NE(run.output.find("probe failure on purpose"), std::string::npos) << run.output;
  }
  EXPECT_EQ(count_tagged(tag), 0) << "a rank outlived the run";
}

INSTANTIATE_TEST_SUITE_P(
    DDP, LauncherFailure,
    ::testing::Combine(::testing::Values(Failure{"exception", "failed: probe failure on purpose", 1},
                                         Failure{"exit3", "exited with code 3", 1},
                                         Failure{"segv", "was killed by signal 11", 128 + 11},
                                         Failure{"sigkill", "was killed by signal 9", 128 + 9}),
                       ::testing::Values(0, 1)),
    [](const auto& info) { return std::get<0>(info.param).kind + "_rank" + std::to_string(std::get<1>(info.param)); });

// LibTorch's errors carry a C++ stack trace of unnamed frames; the caller gets a rank's without it, as
// PyTorch shows them unless TORCH_SHOW_CPP_STACKTRACES=1.
TEST(DDP, ARanksLibTorchErrorReachesTheCallerWithoutItsStackTrace) {
  const std::string args = "--strategy ddp_spawn --devices 2 --steps 200 --fail.kind torch --fail.rank 1 --fail.step 3";
  const auto run = probe(args);
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("probe: error: ddp_spawn: rank 1 failed: probe LibTorch failure on purpose\n"),
            std::string::npos)
      << run.output;
  // (Rank 1's own catch in the probe, the user's code, may print the error with its trace first.)
  EXPECT_EQ(run.output.find("rank 1 failed: probe LibTorch failure on purpose\nException raised from"),
            std::string::npos)
      << run.output;
  const auto traced = probe(args, "TORCH_SHOW_CPP_STACKTRACES=1");
  EXPECT_NE(traced.output.find("rank 1 failed: probe LibTorch failure on purpose\nException raised from"),
            std::string::npos)
      << traced.output;
}

// After rank 1 failed, the program cannot start its ranks again: a new Trainer says so at once
// instead of waiting out the rendezvous for ranks that are gone.
TEST(DDP, AProgramWhoseRankFailedCannotStartItsRanksAgain) {
  const double timeout = 60;
  const auto run = probe(
      "--strategy ddp_spawn --devices 2 --steps 200 --fail.kind exception --fail.rank 1 --fail.step 3 "
      "--fit-again 1 --timeout " +
      std::to_string(timeout));
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("probe: error: ddp_spawn: rank 1 failed: probe failure on purpose"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("probe: fit again: ddp_spawn cannot start its ranks again in this program: rank 1 "
                            "failed: probe failure on purpose; a program's ddp_spawn ranks run until one fails: run "
                            "the program again"),
            std::string::npos)
      << run.output;
  EXPECT_LT(run.seconds, timeout / 2) << run.output;
}

// Devices that cannot be had are an error before ddp_spawn starts a rank: the program's error
// alone, not also a rank started to fail on them and the launcher's line about that rank.
TEST(DDP, DevicesThatCannotBeHadFailBeforeAnyRankStarts) {
  const auto run = probe("--strategy ddp_spawn --device-list 0,1 --steps 4");
  EXPECT_EQ(run.status, 1) << run.output;
  const std::string error =
      "probe: error: accelerator 'cpu' takes devices as a process count, not indices; write devices: 2";
  const size_t first = run.output.find(error);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(error, first + 1), std::string::npos) << "a rank started and failed too: " << run.output;
  EXPECT_EQ(run.output.find("ddp_spawn: rank 1"), std::string::npos) << run.output;
}

// Rank 0 sleeps 60 s in the step where rank 1 fails: it gets to no wait for the others, so after
// collective_timeout (1 s) its launcher ends it, naming rank 1's error, as a peer's timeout would.
TEST(DDP, ARankZeroThatDoesNotNoticeAFailedRankIsEndedAfterCollectiveTimeout) {
  const auto run = probe(
      "--strategy ddp_spawn --devices 2 --steps 20 --fail.kind exception --fail.rank 1 --fail.step 3 "
      "--stall.rank 0 --stall.step 3 --stall.ms 60000 --collective-timeout 1");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("[arc] error: ddp_spawn: rank 1 failed: probe failure on purpose; rank 0 did not get to a "
                            "wait for the other ranks within collective_timeout (1 s) after it, so it ends too"),
            std::string::npos)
      << run.output;
  // Long before the 60 s sleep ends: half of it leaves a loaded machine a wide margin.
  EXPECT_LT(run.seconds, 30) << run.output;
}

TEST(DDP, RendezvousTimeoutNamesTheMissingRank) {
  const std::string env =
      "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  const double timeout = 2;
  const auto run = probe("--strategy ddp --devices 2 --steps 2 --timeout " + std::to_string(timeout), env);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("rank(s) 1 of 2 did not join the rendezvous"), std::string::npos) << run.output;
  // The configured timeout ends the wait, not the default of 1800 s: the bound leaves a loaded
  // machine ten times the timeout plus half a minute to start the program.
  EXPECT_LT(run.seconds, 10 * timeout + 30) << run.output;
}

// Without a launcher to end the job, the survivor notices by itself that its peer is gone.
TEST(DDP, PeerKilledMidTrainingFailsTheSurvivorQuickly) {
  const std::string port = std::to_string(free_port());
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
  const double timeout = 60;
  const std::string args = "--strategy ddp --devices 2 --steps 200 --timeout " + std::to_string(timeout) +
                           " --fail.kind sigkill --fail.rank 1 --fail.step 7";
  CommandRun rank1;
  std::thread second([&] { rank1 = probe(args, "RANK=1 LOCAL_RANK=1 " + env); });
  const auto rank0 = probe(args, "RANK=0 LOCAL_RANK=0 " + env);
  second.join();
  EXPECT_NE(rank0.status, 0);
  EXPECT_LT(rank0.seconds, timeout / 2) << "the timeout must not be what ends it";
  EXPECT_NE(rank0.output.find("rank 1 (pid "), std::string::npos) << rank0.output;
  EXPECT_NE(rank0.output.find("exited during a shared-memory collective"), std::string::npos) << rank0.output;
}

}  // namespace
