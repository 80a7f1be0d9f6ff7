// Decisions every DDP rank takes together: stopping (requests, unsynced monitored values, max_time),
// validation by the clock, ModelCheckpoint and ReduceLROnPlateau on unsynced values, Ctrl-C.
#include "strategies/ddp_support.h"
#include "support/ports.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <thread>

namespace {

using namespace arc::testing::ddp;
using arc::testing::free_port;

// A time-based val_check_interval that runs out on rank 0 alone (rank 1's is an hour): the per-batch
// vote makes both validate at the same steps (30 steps of at least 20 ms: the 0.2 s interval runs
// out at least once).
TEST(DDP, ADurationAsValCheckIntervalValidatesEveryRankAtTheSameStep) {
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 30 --step-ms 20 --val.every-seconds 0.2");
  ASSERT_EQ(run.status, 0) << run.output;
  std::map<int, std::vector<int>> steps;
  std::istringstream lines(run.output);
  for (std::string word; lines >> word;) {
    if (word != "VALIDATED") continue;
    int rank = 0, step = 0;
    lines >> rank >> step;
    steps[rank].push_back(step);
  }
  ASSERT_FALSE(steps[0].empty()) << run.output;
  EXPECT_EQ(steps[0], steps[1]) << run.output;
}

// SIGINT to one rank (here: it raises it itself) stops every rank at the same batch boundary, and
// every process ends with 130: under ddp_spawn, and under ddp with processes started by hand.
TEST(DDP, SigintToOneRankStopsEveryRankWith130) {
  const double timeout = 60;
  const std::string args =
      "--devices 2 --steps 100000 --step-ms 5 --fail.kind sigint --fail.rank 1 --fail.step 10 --timeout " +
      std::to_string(timeout);
  const auto spawned = probe("--strategy ddp_spawn " + args);
  EXPECT_EQ(spawned.status, 130) << spawned.output;
  EXPECT_NE(spawned.output.find("fit interrupted by SIGINT (Ctrl-C) at global step"), std::string::npos)
      << spawned.output;
  EXPECT_NE(spawned.output.find("nothing was saved at this step (an OnExceptionCheckpoint callback saves it)"),
            std::string::npos)
      << spawned.output;
  EXPECT_EQ(spawned.output.find("[arc] error"), std::string::npos) << spawned.output;
  EXPECT_LT(spawned.seconds, timeout / 2) << spawned.output;

  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  CommandRun rank1;
  std::thread second([&] { rank1 = probe("--strategy ddp " + args, "RANK=1 LOCAL_RANK=1 " + env); });
  const auto rank0 = probe("--strategy ddp " + args, "RANK=0 LOCAL_RANK=0 " + env);
  second.join();
  EXPECT_EQ(rank0.status, 130) << rank0.output;
  EXPECT_EQ(rank1.status, 130) << rank1.output;
  EXPECT_NE(rank0.output.find("fit interrupted by SIGINT (Ctrl-C) at global step"), std::string::npos) << rank0.output;
}

// Ranks that disagree on stopping: one asks alone, one sees another value of an unsynced metric,
// one's clock passes max_time first. Every rank must stop at the same step, and nothing may wait
// for a rank that left (the run would end by the timeout, with an error). A stop mid-epoch
// validates first, as Lightning's, unless a validation came after the stop was asked for.
struct Disagreement {
  std::string name;
  std::string args;
  int64_t expected_step;         // -1: any step before the limit
  int64_t expected_validations;  // -1: any number
};

void PrintTo(const Disagreement& disagreement, std::ostream* out) { *out << disagreement.name; }

class DisagreeingRanks : public ::testing::TestWithParam<Disagreement> {};

TEST_P(DisagreeingRanks, StopTogetherAtTheSameStep) {
  const auto& disagreement = GetParam();
  const auto run = probe("--strategy ddp_spawn --devices 2 --timeout 60 --steps 100000 " + disagreement.args);
  ASSERT_EQ(run.status, 0) << run.output;
  // Both ranks print each tag with the same value, the one expected where given.
  for (const auto& [tag, expected] : {std::pair{"STOPPED", disagreement.expected_step},
                                      std::pair{"VALIDATIONS", disagreement.expected_validations}}) {
    const auto values = per_rank(run.output, tag);
    ASSERT_EQ(values.size(), 2u) << tag << "\n" << run.output;
    EXPECT_EQ(values.at(0), values.at(1)) << tag << "\n" << run.output;
    if (expected >= 0) {
      EXPECT_EQ(values.at(0), expected) << tag << "\n" << run.output;
    }
  }
  EXPECT_LT(per_rank(run.output, "STOPPED").at(0), 100000) << run.output;
  EXPECT_GE(per_rank(run.output, "VALIDATIONS").at(0), 1) << run.output;
}

// 512 samples, 2 ranks x batch 16: 16 batches an epoch. The lone request at step 5 takes effect one
// batch later (the vote overlaps a batch), and the stop validates there (also in the second epoch,
// after the first epoch's validation); EarlyStopping's at the end
// of the first epoch, or, validating every 4 batches, after the validation at step 4, one batch
// later and without validating again.
INSTANTIATE_TEST_SUITE_P(
    DDP, DisagreeingRanks,
    ::testing::Values(Disagreement{"OneRankRequestsStop", "--stop.rank 1 --stop.step 5", 7, 1},
                      Disagreement{"OneRankRequestsStopAfterAValidation", "--stop.rank 1 --stop.step 21", 23, 2},
                      Disagreement{"UnsyncedMonitoredValue", "--early-stop.rank 1", 16, 1},
                      Disagreement{"UnsyncedMonitoredValueMidEpoch", "--early-stop.rank 1 --val.every 4", 5, 1},
                      Disagreement{"MaxTimeWithSkewedClocks", "--max-time 2 --late.rank 1 --late.ms 1500 --step-ms 10",
                                   -1, -1}),
    [](const auto& info) { return info.param.name; });

// A ModelCheckpoint that monitors a value logged without sync_dist (rank 0: the step, rank 1 its
// negation) decides by rank 0's value on every rank: rank 1 alone would keep each new file, saving
// where rank 0 does not, and the ranks' collectives would part.
TEST(DDP, ModelCheckpointDecidesByRankZerosValueOnEveryRank) {
  const auto root = scratch_path("monitor");
  const auto run =
      two_ranks("--steps 12 --log.rank-value 1 --checkpoints.every 1 --checkpoints.monitor rank_value --root " + root);
  ASSERT_EQ(run.status, 0) << run.output;
  // The first save's value (0) stays the least of rank 0's values.
  const auto best = best_per_rank(run.output);
  ASSERT_EQ(best.size(), 2u) << run.output;
  const std::string first = root + "/checkpoints/epoch=0-step=1.ckpt";
  for (const auto& [rank, kept] : best) {
    EXPECT_EQ(kept.first, first) << "rank " << rank << "\n" << run.output;
    EXPECT_EQ(kept.second, "0.000000") << "rank " << rank << "\n" << run.output;
  }
  EXPECT_EQ(files_in(root + "/checkpoints"), std::vector<std::string>{first}) << run.output;
  std::filesystem::remove_all(root);
}

// train_time_interval goes by the clock the ranks agree on: rank 1's ModelCheckpoint starts its clock a
// second after rank 0's, so that rank 1's own clock would pass each interval well after rank 0's.
TEST(DDP, ModelCheckpointSavesByTheClockAtTheSameStepOnEveryRank) {
  const auto root = scratch_path("by_time");
  const auto run = two_ranks(
      "--steps 120 --step-ms 10 --slow-fit-start.rank 1 --slow-fit-start.ms 1000 --checkpoints.seconds 0.3 --root " +
      root);
  ASSERT_EQ(run.status, 0) << run.output;
  const auto best = best_per_rank(run.output);
  ASSERT_EQ(best.size(), 2u) << run.output;
  EXPECT_EQ(best.at(0).first, best.at(1).first) << run.output;
  // Saves by the clock alone (none at the epochs' ends, as in Lightning): a file, the latest kept.
  EXPECT_EQ(files_in(root + "/checkpoints"), std::vector<std::string>{best.at(0).first}) << run.output;
  std::filesystem::remove_all(root);
}

// A ReduceLROnPlateau on a value logged without sync_dist steps on rank 0's value on every rank: on
// their own values rank 0's learning rate would halve at every step and rank 1's never, and their
// weights would part.
TEST(DDP, APlateauSchedulerOnAnUnsyncedValueKeepsTheRanksWeightsEqual) {
  const auto out = scratch_path("plateau");
  const auto run = two_ranks("--steps 12 --log.rank-value 1 --plateau rank_value --out-every-rank 1 --out " + out);
  ASSERT_EQ(run.status, 0) << run.output;
  const auto rank0 = read_floats(out + ".0"), rank1 = read_floats(out + ".1");
  ASSERT_FALSE(rank0.empty());
  EXPECT_EQ(rank0, rank1);
  // Both ranks at rank 0's rate: rank 0's value rises at every step after the first, so that the rate
  // halved at each of the 11 (rank 1's falling value would have kept 0.1).
  EXPECT_EQ(per_rank<double>(run.output, "LR"), (std::map<int64_t, double>{{0, 0.1 / 2048}, {1, 0.1 / 2048}}))
      << run.output;
  for (const auto* suffix : {"", ".0", ".1"}) std::remove((out + suffix).c_str());
}

}  // namespace
