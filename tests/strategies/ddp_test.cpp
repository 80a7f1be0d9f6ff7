// DDP end to end with real processes: ddp_spawn runs of the probe program, and the same
// program joined by hand under strategy ddp.
#include <arc/base/host.h>
#include <arc/core/checkpoint.h>
#include <arc/strategies/process_group.h>

#include "support/command.h"
#include "support/ports.h"
#include "support/scratch.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using arc::testing::CommandRun;
using arc::testing::count_tagged;
using arc::testing::free_port;

CommandRun probe(const std::string& args, const std::string& env = "") {
  return arc::testing::run_command(env + " timeout 120 " + std::string(ARC_PROBE) + " " + args);
}

nlohmann::json report(const CommandRun& run) { return arc::cli::read_report(run.output, "PROBE"); }

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values;
  float v;
  while (in.read(reinterpret_cast<char*>(&v), 4)) values.push_back(v);
  return values;
}

std::string scratch_path(const std::string& name) {
  return (arc::testing::process_scratch() / ("ddp_test_" + name)).string();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// Trains in one process and on two ranks (ddp_spawn), each with its own arguments; the largest
// difference between their final parameters. `ddp` gets the two-rank run.
double weights_apart(const std::string& single_args, const std::string& ddp_args, CommandRun& ddp) {
  const auto one = scratch_path("one"), two = scratch_path("two");
  const auto single = probe("--strategy single_device --devices 1 --out " + one + " " + single_args);
  EXPECT_EQ(single.status, 0) << single.output;
  ddp = probe("--strategy ddp_spawn --devices 2 --out " + two + " " + ddp_args);
  EXPECT_EQ(ddp.status, 0) << ddp.output;
  const auto a = read_floats(one), b = read_floats(two);
  std::remove(one.c_str());
  std::remove(two.c_str());
  EXPECT_EQ(a.size(), b.size());
  EXPECT_FALSE(a.empty());
  return a.size() == b.size() && !a.empty() ? max_abs_diff(a, b) : std::numeric_limits<double>::infinity();
}

void expect_parity(int64_t accumulate) {
  const std::string common = " --steps 40 --accumulate " + std::to_string(accumulate);
  CommandRun ddp;
  EXPECT_LT(weights_apart("--batch 32" + common, "--batch 16" + common, ddp), 1e-6);
  EXPECT_EQ(report(ddp)["world_size"], 2);
  EXPECT_EQ(report(ddp)["global_step"], 40);
}

TEST(DDP, TwoRanksMatchOneProcessWithTwiceTheBatch) { expect_parity(1); }

TEST(DDP, TwoRanksMatchOneProcessWithGradientAccumulation) { expect_parity(2); }

// Rank 1 alone returns no loss for batch 3, which ends an optimizer step: both ranks skip that step,
// as one process skipping the same (global) batch does.
TEST(DDP, AStepOneRankSkipsIsSkippedByEveryRank) {
  for (const std::string accumulate : {"1", "2"}) {
    SCOPED_TRACE("accumulate " + accumulate);
    const std::string common = " --steps 10 --skip-batch 3 --accumulate " + accumulate;
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --skip-rank 0" + common, "--batch 16 --skip-rank 1" + common, ddp), 1e-6);
    EXPECT_NE(ddp.output.find("STOPPED 0 10"), std::string::npos) << ddp.output;
    EXPECT_NE(ddp.output.find("STOPPED 1 10"), std::string::npos) << ddp.output;
  }
  // Inside an accumulation window a rank's skipped batch only adds no gradient of its own.
  const auto inside = probe("--strategy ddp_spawn --devices 2 --steps 10 --accumulate 2 --skip-rank 1 --skip-batch 4");
  ASSERT_EQ(inside.status, 0) << inside.output;
  EXPECT_NE(inside.output.find("STOPPED 1 10"), std::string::npos) << inside.output;
}

// SpikeDetection: a spike that rank 1 alone sees ends every rank at that batch, rank 0 too with the
// spike's own error (not as a failed rank's), and rank 0 lists the batches to skip.
TEST(DDP, ASpikeOnOneRankEndsEveryRankAtThatBatch) {
  const std::string root = scratch_path("spike");
  std::filesystem::remove_all(root);
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 20 --spike-rank 1 --spike-batch 5 --root " + root);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("probe: error: Training spike detected in batch 5 of epoch 0 (SpikeDetection)"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("rank 1 failed"), std::string::npos) << run.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(root + "/skip_batches.json")), nlohmann::json({4, 5}));
  std::filesystem::remove_all(root);
}

// Lightning's sync_batchnorm: two ranks of 32 samples normalize as one process of 64 does; without
// it each rank normalizes its own half and the weights part. Not bit for bit: LibTorch's batch_norm
// kernel and the summed statistics round differently (after 20 steps 3e-5 apart at most, against
// 1.2e-2 unsynchronized).
TEST(DDP, SyncBatchNormOnTwoRanksMatchesOneProcessWithTheWholeBatch) {
  const std::string common = " --steps 20 --batchnorm 1";
  CommandRun synced, local;
  EXPECT_LT(weights_apart("--batch 64" + common, "--batch 32 --sync-batchnorm 1" + common, synced), 1e-4);
  EXPECT_GT(weights_apart("--batch 64" + common, "--batch 32" + common, local), 1e-3);
}

// use_distributed_sampler(false): the loaders leave the data as the user sharded it (each rank its
// half, by its own sampler), which trains as one process on the whole does; sharded again by the
// loader, each rank would read a quarter and the weights would part.
TEST(DDP, UserShardedDataTrainsAsTheDistributedSamplerDoes) {
  CommandRun ddp;
  EXPECT_LT(weights_apart("--batch 32 --steps 20", "--batch 16 --steps 20 --user-shard 1", ddp), 1e-6);
  EXPECT_EQ(report(ddp)["global_step"], 20);
}

// A stream of 97 samples gives rank 0 49 (4 batches of up to 16) and rank 1 48 (3): the epoch ends
// after 3 batches on both, the third ending an accumulation window, as one process on the first 96
// in batches of 32; without the ranks agreeing, rank 0 would wait in a fourth all-reduce.
TEST(DDP, AStreamEndsTheEpochOnEveryRankWhereTheShortestShareEnds) {
  for (const std::string accumulate : {"1", "2"}) {
    SCOPED_TRACE("accumulate " + accumulate);
    const std::string common = " --steps 12 --accumulate " + accumulate;
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --stream 96" + common, "--batch 16 --stream 97" + common, ddp), 1e-6);
    EXPECT_NE(ddp.output.find("STOPPED 0 12"), std::string::npos) << ddp.output;
    EXPECT_NE(ddp.output.find("STOPPED 1 12"), std::string::npos) << ddp.output;
  }
}

// A CombinedLoader's sources are each sharded by rank: two ranks train as one process with twice
// both batches, the shorter source ("b": 6 global batches against 16 of "a") started over on every
// rank at the same batch, and the run stops at max_steps past the end of an epoch of 16.
TEST(DDP, ACombinedLoaderTrainsAsOneProcessWithTwiceEachSourcesBatch) {
  CommandRun ddp;
  EXPECT_LT(weights_apart("--batch 32 --steps 20 --combined 96", "--batch 16 --steps 20 --combined 96", ddp), 1e-6);
  EXPECT_NE(ddp.output.find("STOPPED 0 20"), std::string::npos) << ddp.output;
  EXPECT_NE(ddp.output.find("STOPPED 1 20"), std::string::npos) << ddp.output;
}

// The gradient reduction follows which parameters require gradients. BackboneFinetuning: the
// backbone (fc1), frozen at the start, joins the reduction when it is unfrozen at epoch 1 (Lightning's
// DDP leaves it out, so that each rank trains its own copy: its issue 20340). Manual optimization
// toggling two optimizers (GAN-style) needs no find_unused_parameters: each toggled set has its
// reducer. Either way two ranks train as one process with twice the batch. Ranks that freeze
// different parameters are an error on every rank.
TEST(DDP, TheGradientReductionFollowsWhichParametersRequireGradients) {
  for (const std::string args :
       {" --steps 40 --finetune 1", " --steps 30 --toggle 1", " --steps 30 --toggle 1 --shared-memory 0"}) {
    SCOPED_TRACE(args);
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32" + args, "--batch 16" + args, ddp), 1e-6);
    EXPECT_NE(ddp.output.find("parameter tensors require gradients now; their buckets are rebuilt"), std::string::npos)
        << ddp.output;
  }
  const auto apart = probe("--strategy ddp_spawn --devices 2 --steps 4 --freeze-rank 1");
  EXPECT_NE(apart.status, 0);
  EXPECT_NE(apart.output.find("the ranks train different parameters (parameter tensors that require gradients of "
                              "the module's 4: rank 0 4, rank 1 3); every rank must freeze and unfreeze the same"),
            std::string::npos)
      << apart.output;
  // As many on each rank, but not the same ones: the sets are compared, not only their sizes.
  const auto crossed = probe("--strategy ddp_spawn --devices 2 --steps 4 --freeze-rank 1 --freeze-bias-elsewhere 1");
  EXPECT_NE(crossed.status, 0);
  EXPECT_NE(crossed.output.find("the module's 4: rank 0 3, rank 1 3, but not the same ones); every rank must"),
            std::string::npos)
      << crossed.output;
}

// A loss over every rank's outputs (gathered with sync_grads, as a contrastive loss is): each rank's
// outputs get every rank's gradient for them, so two ranks train as one process with twice the
// batch. Tensors of different shapes are an error on every rank that names each rank's.
TEST(DDP, AllGatherWithSyncGradsTrainsAsOneProcessWithTheWholeBatch) {
  for (const std::string shared_memory : {"1", "0"}) {
    SCOPED_TRACE("shared memory " + shared_memory);
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --steps 12 --gather 1",
                            "--batch 16 --steps 12 --gather 1 --shared-memory " + shared_memory, ddp),
              1e-6);
  }
  const auto mismatch = probe("--strategy ddp_spawn --devices 2 --batch 16 --steps 4 --gather 2");
  EXPECT_NE(mismatch.status, 0);
  EXPECT_NE(mismatch.output.find("all_gather: the ranks' tensors differ (rank 0 [16, 3] Float, rank 1 [15, 3] Float)"),
            std::string::npos)
      << mismatch.output;
}

// Validation over a stream of 97 samples: each rank evaluates its whole share (49 and 48), and the
// synced val_loss is the mean over all 97, as one process gives. A per-step synced value cannot
// pair up over shares of different lengths: an error on every rank that says what to log instead.
TEST(DDP, ValidationOverAStreamCountsEverySampleOfEveryRank) {
  const auto single = probe("--strategy single_device --devices 1 --batch 32 --steps 16 --val-stream 97");
  ASSERT_EQ(single.status, 0) << single.output;
  // Also through Gloo, whose threads cannot write the inference tensors of the metric sync.
  for (const std::string shared_memory : {"1", "0"}) {
    SCOPED_TRACE("shared memory " + shared_memory);
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --steps 16 --val-stream 97",
                            "--batch 16 --steps 16 --val-stream 97 --shared-memory " + shared_memory, ddp),
              1e-6);
    EXPECT_NEAR(report(ddp)["val_loss"].get<double>(), report(single)["val_loss"].get<double>(), 1e-5);
  }
  const auto per_step =
      probe("--strategy ddp_spawn --devices 2 --batch 16 --steps 16 --val-stream 97 --val-step-sync 1");
  EXPECT_NE(per_step.status, 0);
  EXPECT_NE(per_step.output.find("on_step=true and sync_dist=true in an evaluation step over a stream"),
            std::string::npos)
      << per_step.output;
}

// User-sharded data where rank 1 has 14 batches of 16 and rank 0 16: by default an error on both
// ranks that names the counts and the fix (before, the ranks' collectives fell out of step after
// rank 1's last batch); "drop" stops every rank after 14, as one process on the first 448 samples in batches of
// 32; "pad" lets rank 1 repeat its first 2 batches, and both ranks take 16 steps an epoch.
TEST(DDP, UnevenUserShardsFollowEvenBatches) {
  const std::string uneven = "--strategy ddp_spawn --devices 2 --batch 16 --user-shard 1 --uneven-drop 32";
  const auto refused = probe(uneven + " --steps 20");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("the ranks' training data give different batch counts in epoch 0: from 14 to 16"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("set even_batches to \"pad\""), std::string::npos) << refused.output;
  CommandRun dropped;
  EXPECT_LT(weights_apart("--batch 32 --steps 28 --stream 448",
                          "--batch 16 --steps 28 --user-shard 1 --uneven-drop 32 --even-batches drop", dropped),
            1e-6);
  EXPECT_EQ(report(dropped)["global_step"], 28);
  const auto padded = probe(uneven + " --steps 32 --even-batches pad");
  ASSERT_EQ(padded.status, 0) << padded.output;
  EXPECT_NE(padded.output.find("STOPPED 0 32"), std::string::npos) << padded.output;
  EXPECT_NE(padded.output.find("STOPPED 1 32"), std::string::npos) << padded.output;
  EXPECT_EQ(report(padded)["global_step"], 32);
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
        "--stall-rank 1 --stall-step 3 --stall-ms 20000 --shared-memory " +
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

// A layer the loss never uses: an error that names it, unless find_unused_parameters or
// static_graph allows it; both train to the same weights as one process.
TEST(DDP, StaticGraphTrainsAsFindUnusedParametersDoes) {
  const std::string common = " --steps 20 --spare 1";
  const auto strict = probe("--strategy ddp_spawn --devices 2 --batch 16" + common);
  EXPECT_NE(strict.status, 0);
  EXPECT_NE(strict.output.find("parameters spare.weight, spare.bias got no gradient"), std::string::npos)
      << strict.output;
  CommandRun ddp;
  EXPECT_LT(weights_apart("--batch 32" + common, "--batch 16 --static-graph 1" + common, ddp), 1e-6);
  EXPECT_LT(weights_apart("--batch 32" + common, "--batch 16 --find-unused 1" + common, ddp), 1e-6);
  // Lightning's name for the same.
  EXPECT_LT(
      weights_apart("--batch 32" + common, "--batch 16 --strategy ddp_spawn_find_unused_parameters_true" + common, ddp),
      1e-6);
}

// A time-based val_check_interval that runs out on rank 0 alone (rank 1's is an hour): the per-batch
// vote makes both validate at the same steps (30 steps of at least 20 ms: the 0.2 s interval runs
// out at least once).
TEST(DDP, ADurationAsValCheckIntervalValidatesEveryRankAtTheSameStep) {
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 30 --step-ms 20 --val-every-seconds 0.2");
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

TEST(DDP, SyncDistReducesEveryMetricAcrossRanks) {
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 8");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto metrics = report(run);
  EXPECT_DOUBLE_EQ(metrics["rank_mean_epoch"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(metrics["rank_max_epoch"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(metrics["rank_min_epoch"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(metrics["rank_sum"].get<double>(), 8.0);  // 8 steps x (0 + 1)
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
                         " --fail " + failure.kind + " --fail-rank " + std::to_string(rank) + " --fail-step " +
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

// A value whose name holds the rank, logged with sync_dist: the ranks sync as many values under other
// names, which they would add into each other; instead every rank fails at the first step's sync.
TEST(DDP, RanksThatSyncOtherNamesFailTogether) {
  const double timeout = 60;
  const auto run =
      probe("--strategy ddp_spawn --devices 2 --steps 8 --rank-named-sync 1 --timeout " + std::to_string(timeout));
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("the values logged with sync_dist=True have other names on rank 1 than here (rank_0, "
                            "rank_max, rank_mean, rank_min)"),
            std::string::npos)
      << run.output;
  EXPECT_LT(run.seconds, timeout / 2) << run.output;
  // So in a user's own loop: Accelerator::all_reduce_dict of a map whose name holds the rank.
  const auto own_loop =
      probe("--strategy ddp_spawn --devices 2 --steps 8 --loop custom --rank-named-sync 1 --timeout " +
            std::to_string(timeout));
  EXPECT_EQ(own_loop.status, 1) << own_loop.output;
  EXPECT_NE(
      own_loop.output.find("all_reduce of a map: another rank's map has other names than this rank's (loss_rank0)"),
      std::string::npos)
      << own_loop.output;
  EXPECT_LT(own_loop.seconds, timeout / 2) << own_loop.output;
}

// LibTorch's errors carry a C++ stack trace of unnamed frames; the caller gets a rank's without it, as
// PyTorch shows them unless TORCH_SHOW_CPP_STACKTRACES=1.
TEST(DDP, ARanksLibTorchErrorReachesTheCallerWithoutItsStackTrace) {
  const std::string args = "--strategy ddp_spawn --devices 2 --steps 200 --fail torch --fail-rank 1 --fail-step 3";
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

// In a user's own loop (arc::Accelerator), an exception that leaves the loop ends the ranks as it
// does in a Trainer: rank 0's at once (the other rank waits for it in a collective, and waited out
// the timeout before), rank 1's as rank 0's error.
TEST(DDP, AnExceptionLeavingAnAcceleratorLoopEndsEveryRankAtOnce) {
  const double timeout = 60;
  for (const int rank : {0, 1}) {
    const std::string tag = arc::testing::process_tag("loop" + std::to_string(rank));
    const auto run = probe(
        "--strategy ddp_spawn --devices 2 --steps 200 --loop custom --fail exception --fail-step 3 "
        "--fail-rank " +
        std::to_string(rank) + " --timeout " + std::to_string(timeout) + " --tag " + tag);
    EXPECT_EQ(run.status, 1) << run.output;
    EXPECT_LT(run.seconds, timeout / 2) << run.output;
    EXPECT_NE(
        run.output.find(rank == 0 ? "[arc] error: ddp_spawn: rank 0 failed (an exception left its training loop)"
                                  : "probe: error: ddp_spawn: rank 1 failed: an exception left its training loop"),
        std::string::npos)
        << run.output;
    EXPECT_EQ(count_tagged(tag), 0) << "a rank outlived the run";
  }
}

// After rank 1 failed, the program cannot start its ranks again: a new Trainer says so at once
// instead of waiting out the rendezvous for ranks that are gone.
TEST(DDP, AProgramWhoseRankFailedCannotStartItsRanksAgain) {
  const double timeout = 60;
  const auto run = probe(
      "--strategy ddp_spawn --devices 2 --steps 200 --fail exception --fail-rank 1 --fail-step 3 "
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
      "--strategy ddp_spawn --devices 2 --steps 20 --fail exception --fail-rank 1 --fail-step 3 "
      "--stall-rank 0 --stall-step 3 --stall-ms 60000 --collective-timeout 1");
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

// What the loggers wrote in `dir`/lightning_logs: "<version>/<file name's first 20 characters>", sorted.
std::vector<std::string> logged_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& version : std::filesystem::directory_iterator(dir + "/lightning_logs"))
    for (const auto& entry : std::filesystem::directory_iterator(version.path()))
      files.push_back(version.path().filename().string() + "/" + entry.path().filename().string().substr(0, 20));
  std::sort(files.begin(), files.end());
  return files;
}

// Runs the probe with loggers writing under `dir` (emptied first) and expects one version, written
// by rank 0 alone: one metrics file, one events file, the hyper-parameters.
void expect_one_version_from_rank_zero(const std::string& args, const std::string& dir) {
  std::filesystem::remove_all(dir);
  const auto run = probe(args + " --loggers " + dir);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(logged_files(dir), (std::vector<std::string>{"version_0/events.out.tfevents.", "version_0/hparams.yaml",
                                                         "version_0/metrics.csv"}))
      << run.output;
}

// Loggers built in main exist on every rank, but only rank 0 writes, into the one version that
// every rank agrees on: one version_0 with one metrics file and one events file.
TEST(DDP, LoggersBuiltInMainWriteOneVersionFromRankZero) {
  const auto dir = scratch_path("loggers");
  ASSERT_NO_FATAL_FAILURE(expect_one_version_from_rank_zero("--strategy ddp_spawn --devices 2 --steps 20", dir));
  std::filesystem::remove_all(dir);
}

// The same with a loop of one's own: arc::Accelerator's loggers write one version, from rank 0.
TEST(DDP, AnAcceleratorsLoggersWriteOneVersionFromRankZero) {
  const auto dir = scratch_path("accelerator_loggers");
  ASSERT_NO_FATAL_FAILURE(
      expect_one_version_from_rank_zero("--loop custom --strategy ddp_spawn --devices 2 --steps 12", dir));
  std::ifstream csv(dir + "/lightning_logs/version_0/metrics.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 13u) << "a header and one row a step, from one rank";
  EXPECT_EQ(lines[0], "step,train_loss");
  EXPECT_EQ(lines[12].substr(0, 3), "11,");
  std::filesystem::remove_all(dir);
}

// Rank 1 sleeps 20 ms in every step: every 5 steps the ranks compare their own step times (waits
// for each other left out) and the loggers get perf/slowest_rank 1 and the ratio; after three
// intervals rank 1 warns once, naming itself, its host and that it computes (not loads data). With
// even ranks, nobody warns.
TEST(DDP, AStragglerIsNamedByItsOwnStepTime) {
  const auto dir = scratch_path("stragglers");
  std::filesystem::remove_all(dir);
  const auto slow = probe(
      "--strategy ddp_spawn --devices 2 --steps 30 --log-every 5 --slow-rank 1 --slow-ms 20 "
      "--loggers " +
      dir);
  ASSERT_EQ(slow.status, 0) << slow.output;
  const std::string warning = "rank 1 on " + arc::host_name() + " has been at least 20% slower than the median rank";
  EXPECT_NE(slow.output.find(warning), std::string::npos) << slow.output;
  EXPECT_EQ(slow.output.find(warning, slow.output.find(warning) + 1), std::string::npos) << "warned twice";
  EXPECT_NE(slow.output.find("it computes more slowly"), std::string::npos) << slow.output;
  // The last value logged for perf/slowest_rank (other rows leave its cell empty).
  const auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream parts(line);
    for (std::string cell; std::getline(parts, cell, ',');) out.push_back(cell);
    return out;
  };
  std::ifstream csv(dir + "/lightning_logs/version_0/metrics.csv");
  std::string header, row, slowest;
  std::getline(csv, header);
  const auto columns = cells(header);
  const auto column =
      static_cast<size_t>(std::find(columns.begin(), columns.end(), "perf/slowest_rank") - columns.begin());
  ASSERT_LT(column, columns.size()) << header;
  int64_t rows = 0;
  while (std::getline(csv, row)) {
    const auto values = cells(row);
    if (column < values.size() && !values[column].empty()) {
      slowest = values[column];
      ++rows;
    }
  }
  EXPECT_EQ(rows, 6);  // 30 steps, every 5
  EXPECT_EQ(slowest, "1") << header;
  std::filesystem::remove_all(dir);
  const auto even = probe("--strategy ddp_spawn --devices 2 --steps 30 --log-every 5 --step-ms 5");
  ASSERT_EQ(even.status, 0) << even.output;
  EXPECT_EQ(even.output.find("slower than the median rank"), std::string::npos) << even.output;
}

// SIGINT to one rank (here: it raises it itself) stops every rank at the same batch boundary, and
// every process ends with 130: under ddp_spawn, and under ddp with processes started by hand.
TEST(DDP, SigintToOneRankStopsEveryRankWith130) {
  const double timeout = 60;
  const std::string args =
      "--devices 2 --steps 100000 --step-ms 5 --fail sigint --fail-rank 1 --fail-step 10 --timeout " +
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

// fit(ckpt_path="last") on ranks whose disks differ: rank 0's folder holds last.ckpt, rank 1's none
// (rank 0 alone writes checkpoints). Every rank takes rank 0's choice and resumes from its file, so
// both train the same steps; a rank that started afresh would fail the run at the first collective.
TEST(DDP, LastIsRankZerosChoiceOnEveryRank) {
  const auto root = scratch_path("last_per_rank");
  std::filesystem::remove_all(root);
  const std::string common =
      "--strategy ddp_spawn --devices 2 --checkpoint-every 4 --save-last 1 --root-per-rank 1 --root " + root;
  const auto first = probe(common + " --steps 8");
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_TRUE(std::filesystem::exists(root + "/rank0/checkpoints/last.ckpt")) << first.output;
  ASSERT_FALSE(std::filesystem::exists(root + "/rank1/checkpoints/last.ckpt")) << first.output;
  const auto second = probe(common + " --steps 12 --ckpt-path last");
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from '" + root + "/rank0/checkpoints/last.ckpt'"), std::string::npos)
      << second.output;
  EXPECT_EQ(second.output.find("starts afresh"), std::string::npos) << second.output;
  for (const char* stopped : {"STOPPED 0 12", "STOPPED 1 12"})
    EXPECT_NE(second.output.find(stopped), std::string::npos) << stopped << "\n" << second.output;
  std::filesystem::remove_all(root);
}

// Rank 0's checkpoint write fails (past its file size limit, as on a full disk): the run ends on
// every rank, soon, with the file, the cause and the fix, and leaves no temporary file.
TEST(DDP, FailedSaveOnRankZeroEndsEveryRankWithTheCause) {
  const auto root = scratch_path("failed_save");
  std::filesystem::remove_all(root);
  const std::string tag = arc::testing::process_tag("failed_save");
  const double timeout = 60;
  const auto run =
      probe("--strategy ddp_spawn --devices 2 --steps 100 --checkpoint-every 5 --fsize-limit 1024 --root " + root +
            " --timeout " + std::to_string(timeout) + " --tag " + tag);
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_LT(run.seconds, timeout / 2) << run.output;
  EXPECT_NE(run.output.find("cannot write checkpoint '" + root + "/checkpoints/"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("File too large"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ulimit -f"), std::string::npos) << run.output;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/checkpoints")) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
  EXPECT_EQ(count_tagged(tag), 0) << "a rank outlived the run";
  std::filesystem::remove_all(root);
}

// The same failure in a background write (async_checkpointing): each rank, started by hand, stops
// at the same batch soon after, with rank 0's error; no temporary file stays.
TEST(DDP, FailedBackgroundSaveOnRankZeroEndsEveryRankWithItsCause) {
  const auto root = scratch_path("failed_background_save");
  std::filesystem::remove_all(root);
  const double timeout = 60;
  const std::string args = "--strategy ddp --devices 2 --steps 200 --checkpoint-every 5 --fsize-limit 1024 " +
                           std::string("--async-checkpoint 1 --root ") + root + " --timeout " + std::to_string(timeout);
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  CommandRun rank1;
  std::thread second([&] { rank1 = probe(args, "RANK=1 LOCAL_RANK=1 " + env); });
  const auto rank0 = probe(args, "RANK=0 LOCAL_RANK=0 " + env);
  second.join();
  std::string stopped_at;
  for (const CommandRun* run : std::vector<const CommandRun*>{&rank0, &rank1}) {
    EXPECT_EQ(run->status, 1) << run->output;
    EXPECT_LT(run->seconds, timeout / 2) << run->output;
    const auto at = run->output.find("fit stopped at global step ");
    ASSERT_NE(at, std::string::npos) << run->output;
    const auto step = run->output.substr(at, run->output.find(':', at) - at);
    EXPECT_TRUE(stopped_at.empty() || step == stopped_at) << step << " vs " << stopped_at;
    stopped_at = step;
    EXPECT_NE(run->output.find("(async_checkpointing) failed on rank 0: cannot write checkpoint '" + root +
                               "/checkpoints/epoch=0-step=5.ckpt' (File too large"),
              std::string::npos)
        << run->output;
  }
  for (const auto& entry : std::filesystem::directory_iterator(root + "/checkpoints"))
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  std::filesystem::remove_all(root);
}

// Saves in the background leave DDP training as it is: the same weights as with synchronous saves,
// and files with the same tensors.
TEST(DDP, BackgroundSavesTrainToTheSameWeightsAndFiles) {
  const auto root = scratch_path("background_saves");
  std::filesystem::remove_all(root);
  std::map<std::string, std::vector<float>> weights;
  for (const std::string async : {"0", "1"}) {
    const auto out = root + "/weights_" + async;
    const auto run = probe("--strategy ddp_spawn --devices 2 --steps 30 --checkpoint-every 5 --async-checkpoint " +
                           async + " --root " + root + "/" + async + " --out " + out);
    ASSERT_EQ(run.status, 0) << run.output;
    weights[async] = read_floats(out);
  }
  ASSERT_FALSE(weights["0"].empty());
  EXPECT_EQ(weights["0"], weights["1"]);
  const std::string last = "/checkpoints/epoch=1-step=30.ckpt";
  const arc::CheckpointReader synchronous(root + "/0" + last), background(root + "/1" + last);
  ASSERT_EQ(synchronous.tensor_names(), background.tensor_names());
  for (const auto& name : synchronous.tensor_names())
    EXPECT_TRUE(torch::equal(synchronous.tensor(name), background.tensor(name))) << name;
  std::filesystem::remove_all(root);
}

// As Lightning: prepare_data runs on local rank 0 only, and the other ranks wait for it.
TEST(DDP, PrepareDataRunsOnceOnLocalRankZero) {
  const auto log = scratch_path("prepare_log");
  std::remove(log.c_str());
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 4 --prepare-log " + log);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(arc::testing::read_file(log), "prepared\n") << run.output;
  std::remove(log.c_str());
}

// Every "<tag> <rank> <value>" line ("STOPPED 1 7"), as rank -> its values in order.
template <typename Value = int64_t>
std::map<int64_t, std::vector<Value>> all_per_rank(const std::string& output, const std::string& tag) {
  std::map<int64_t, std::vector<Value>> values;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string word;
    int64_t rank = -1;
    Value value{};
    if (words >> word >> rank >> value && word == tag) values[rank].push_back(value);
  }
  return values;
}

// The last "<tag> <rank> <value>" of every rank, as rank -> value.
template <typename Value = int64_t>
std::map<int64_t, Value> per_rank(const std::string& output, const std::string& tag) {
  std::map<int64_t, Value> last;
  for (const auto& [rank, values] : all_per_rank<Value>(output, tag)) last[rank] = values.back();
  return last;
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
    ::testing::Values(Disagreement{"OneRankRequestsStop", "--stop-rank 1 --stop-step 5", 7, 1},
                      Disagreement{"OneRankRequestsStopAfterAValidation", "--stop-rank 1 --stop-step 21", 23, 2},
                      Disagreement{"UnsyncedMonitoredValue", "--early-stop-rank 1", 16, 1},
                      Disagreement{"UnsyncedMonitoredValueMidEpoch", "--early-stop-rank 1 --val-every 4", 5, 1},
                      Disagreement{"MaxTimeWithSkewedClocks", "--max-time 2 --late-rank 1 --late-ms 1500 --step-ms 10",
                                   -1, -1}),
    [](const auto& info) { return info.param.name; });

// The probe under ddp_spawn on two ranks, with `args`.
CommandRun two_ranks(const std::string& args) { return probe("--strategy ddp_spawn --devices 2 --timeout 60 " + args); }

// "BEST <rank> <path> <score, or none>" of every rank: what its ModelCheckpoint kept as the best.
std::map<int64_t, std::pair<std::string, std::string>> best_per_rank(const std::string& output) {
  std::map<int64_t, std::pair<std::string, std::string>> best;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string tag, path, score;
    int64_t rank = -1;
    if (words >> tag >> rank >> path >> score && tag == "BEST") best[rank] = {path, score};
  }
  return best;
}

std::vector<std::string> files_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// A ModelCheckpoint that monitors a value logged without sync_dist (rank 0: the step, rank 1 its
// negation) decides by rank 0's value on every rank: rank 1 alone would keep each new file, saving
// where rank 0 does not, and the ranks' collectives would part.
TEST(DDP, ModelCheckpointDecidesByRankZerosValueOnEveryRank) {
  const auto root = scratch_path("monitor");
  const auto run =
      two_ranks("--steps 12 --rank-value 1 --checkpoint-every 1 --checkpoint-monitor rank_value --root " + root);
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
      "--steps 120 --step-ms 10 --fit-start-rank 1 --fit-start-ms 1000 --checkpoint-seconds 0.3 --root " + root);
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
  const auto run = two_ranks("--steps 12 --rank-value 1 --plateau rank_value --out-every-rank 1 --out " + out);
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

// The probe logs rank_mean, rank_max and rank_min (its rank, 0 or 1) with sync_dist in every
// training_step, hook_rank (the same) in on_before_optimizer_step, and end_rank, dict_rank and
// dict_twice_rank (twice the rank; these two in one log_dict) in a callback's on_train_batch_end,
// and no step here is a logger's (log_every_n_steps 1000): what a callback reads at every batch's
// end is still the ranks' value, as in Lightning, where the sync is at the log call.
TEST(DDP, StepValuesLoggedWithSyncDistAreTheRanksValuesAtEveryBatchEnd) {
  for (const auto& [name, expected] :
       {std::pair{"rank_mean_step", 0.5}, std::pair{"rank_max_step", 1.0}, std::pair{"rank_min_step", 0.0},
        std::pair{"hook_rank", 0.5}, std::pair{"end_rank", 0.5}, std::pair{"dict_rank", 0.5},
        std::pair{"dict_twice_rank", 1.0}}) {
    const auto run = two_ranks(std::string("--steps 6 --log-every 1000 --hook-sync 1 --watch ") + name);
    ASSERT_EQ(run.status, 0) << run.output;
    const std::vector<double> every_step(6, expected);
    const std::map<int64_t, std::vector<double>> both_ranks{{0, every_step}, {1, every_step}};
    EXPECT_EQ(all_per_rank<double>(run.output, "WATCH"), both_ranks) << name << "\n" << run.output;
    // As Lightning's, a value is synced at its log call: values logged in training_step before the
    // backward hooks see them, end_rank before the next callback does. The values logged after
    // backward are first there at the second step's.
    const bool after_backward = std::string(name).rfind("rank_", 0) != 0;  // not logged in training_step
    const std::vector<double> at_backward(after_backward ? 5 : 6, expected);
    EXPECT_EQ(all_per_rank<double>(run.output, "BACKWARD"),
              (std::map<int64_t, std::vector<double>>{{0, at_backward}, {1, at_backward}}))
        << name << "\n"
        << run.output;
  }
}

// Each sync of step values is one collective, a log_dict's values together: at every batch end the
// probe has synced the step's values, hook_rank, end_rank and the log_dict of dict_rank and
// dict_twice_rank, 4 (5 were a log_dict's values synced one by one).
TEST(DDP, ALogDictInAHookIsSyncedInOneCollective) {
  const auto root = scratch_path("count_syncs");
  const auto run =
      two_ranks("--steps 6 --log-every 1000 --hook-sync 1 --watch end_rank --count-syncs 1 --root " + root);
  ASSERT_EQ(run.status, 0) << run.output;
  const std::vector<int64_t> four_a_step{4, 8, 12, 16, 20, 24};
  EXPECT_EQ(all_per_rank<int64_t>(run.output, "SYNCS"),
            (std::map<int64_t, std::vector<int64_t>>{{0, four_a_step}, {1, four_a_step}}))
      << run.output;
  std::filesystem::remove_all(root);
}

// The same in validation (2 batches every 3; --max-time gives the probe validation data): a callback
// logs val_end_rank with sync_dist in on_validation_batch_end, and the callback after it sees the
// ranks' value.
TEST(DDP, ValuesThatValidationCallbacksLogWithSyncDistAreTheRanksValues) {
  const auto run =
      two_ranks("--steps 6 --val-every 3 --max-time 3600 --log-every 1000 --hook-sync 1 --watch val_end_rank");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto seen = all_per_rank<double>(run.output, "VALIDATION");
  ASSERT_EQ(seen.size(), 2u) << run.output;
  EXPECT_EQ(seen.at(0).size(), 4u) << run.output;
  EXPECT_EQ(seen.at(0), seen.at(1)) << run.output;
  for (const double value : seen.at(0)) EXPECT_EQ(value, 0.5) << run.output;
}

TEST(DDP, JoinsProcessesStartedByHand) {
  const std::string port = std::to_string(free_port());
  const auto one = scratch_path("hand0"), two = scratch_path("hand1");
  CommandRun rank1;
  std::thread second([&] {
    rank1 = probe("--strategy ddp --devices 2 --steps 10 --timeout 30",
                  "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port);
  });
  const auto rank0 = probe("--strategy ddp --devices 2 --steps 10 --timeout 30 --out " + one,
                           "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port);
  second.join();
  ASSERT_EQ(rank0.status, 0) << rank0.output;
  ASSERT_EQ(rank1.status, 0) << rank1.output;
  const auto spawned = probe("--strategy ddp_spawn --devices 2 --steps 10 --out " + two);
  ASSERT_EQ(spawned.status, 0) << spawned.output;
  ASSERT_FALSE(read_floats(one).empty());
  EXPECT_EQ(read_floats(one), read_floats(two));
  std::remove(one.c_str());
  std::remove(two.c_str());
}

TEST(DDP, SharedMemoryAndGlooTrainToIdenticalWeights) {
  const auto shm = scratch_path("shm"), gloo = scratch_path("gloo");
  const auto with_shm = probe("--strategy ddp_spawn --devices 2 --steps 40 --accumulate 2 --out " + shm);
  ASSERT_EQ(with_shm.status, 0) << with_shm.output;
  EXPECT_NE(with_shm.output.find("shared memory at 127.0.0.1"), std::string::npos) << with_shm.output;
  // Two processes of one thread each leave no core for helper threads on this two-core machine (a
  // helper each needs four), but each has a core to wait on without sleeping; on the training
  // thread, buckets are of one size.
  const bool helper = arc::usable_cores() >= 4;
  EXPECT_NE(with_shm.output.find("shared-memory collectives run on " +
                                 std::string(helper ? "a helper thread" : "the training thread")),
            std::string::npos)
      << with_shm.output;
  EXPECT_NE(with_shm.output.find("a rank waits 1 ms for the others before it sleeps"), std::string::npos)
      << with_shm.output;
  EXPECT_NE(with_shm.output.find(helper ? "gradient buckets of 25 MiB, the first 1 MiB\n"
                                        : "gradient buckets of 25 MiB, the first 25 MiB (all-reduces cannot "
                                          "overlap backward here)"),
            std::string::npos)
      << with_shm.output;
  const auto with_gloo =
      probe("--strategy ddp_spawn --devices 2 --steps 40 --accumulate 2 --shared-memory 0 --out " + gloo);
  ASSERT_EQ(with_gloo.status, 0) << with_gloo.output;
  EXPECT_NE(with_gloo.output.find("gloo at 127.0.0.1"), std::string::npos) << with_gloo.output;
  EXPECT_NE(with_gloo.output.find("gradient buckets of 25 MiB, the first 1 MiB\n"), std::string::npos)
      << with_gloo.output;
  ASSERT_FALSE(read_floats(shm).empty());
  EXPECT_EQ(read_floats(shm), read_floats(gloo));
  EXPECT_EQ(report(with_shm)["rank_sum"], report(with_gloo)["rank_sum"]);
  std::remove(shm.c_str());
  std::remove(gloo.c_str());
}

// Without a launcher to end the job, the survivor notices by itself that its peer is gone.
TEST(DDP, PeerKilledMidTrainingFailsTheSurvivorQuickly) {
  const std::string port = std::to_string(free_port());
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
  const double timeout = 60;
  const std::string args = "--strategy ddp --devices 2 --steps 200 --timeout " + std::to_string(timeout) +
                           " --fail sigkill --fail-rank 1 --fail-step 7";
  CommandRun rank1;
  std::thread second([&] { rank1 = probe(args, "RANK=1 LOCAL_RANK=1 " + env); });
  const auto rank0 = probe(args, "RANK=0 LOCAL_RANK=0 " + env);
  second.join();
  EXPECT_NE(rank0.status, 0);
  EXPECT_LT(rank0.seconds, timeout / 2) << "the timeout must not be what ends it";
  EXPECT_NE(rank0.output.find("rank 1 (pid "), std::string::npos) << rank0.output;
  EXPECT_NE(rank0.output.find("exited during a shared-memory collective"), std::string::npos) << rank0.output;
}

class CustomLoop : public ::testing::TestWithParam<std::string> {};

TEST_P(CustomLoop, OnAcceleratorMatchesTheTrainer) {
  const auto custom = scratch_path("custom"), trained = scratch_path("trained");
  const std::string common = "--strategy ddp_spawn --devices 2 --steps 12 --precision " + GetParam();
  const auto by_hand = probe("--loop custom " + common + " --out " + custom);
  ASSERT_EQ(by_hand.status, 0) << by_hand.output;
  const auto by_trainer = probe(common + " --out " + trained);
  ASSERT_EQ(by_trainer.status, 0) << by_trainer.output;
  ASSERT_FALSE(read_floats(custom).empty());
  EXPECT_EQ(read_floats(custom), read_floats(trained));
  const auto result = report(by_hand);
  EXPECT_EQ(result["world_size"], 2);
  EXPECT_EQ(result["ranks"], nlohmann::json::parse(R"([{"rank": 0}, {"rank": 1}])"));
  // all_reduce_dict by sum and by max, where the ranks' names agree (their check passes).
  EXPECT_EQ(result["rank_sum"], 1.0);
  EXPECT_EQ(result["rank_max"], 1.0);
  // all_reduce_ in place: a reduce_buffer of [3, 1000] summed where it lies, in the memory both
  // ranks map (1 + 2 everywhere), and a strided inference tensor, which keeps its strides.
  EXPECT_EQ(result["buffer_sizes"], nlohmann::json::parse("[3, 1000]"));
  EXPECT_EQ(result["buffer_min"], 3.0);
  EXPECT_EQ(result["buffer_max"], 3.0);
  EXPECT_EQ(result["buffer_stayed"], true);
  EXPECT_EQ(result["buffer_shared"], true);
  EXPECT_EQ(result["strided_sum"], 24.0);
  EXPECT_EQ(result["strided_strides"], nlohmann::json::parse("[1, 4]"));
  std::remove(custom.c_str());
  std::remove(trained.c_str());
}

// Accelerator::save on every rank (rank 0 writes) and load on every rank: a loop saved after step 5
// (mid-epoch) and resumed from that file ends as the loop that never stopped.
TEST_P(CustomLoop, SavedAndLoadedOnEveryRankResumesExactly) {
  const auto whole = scratch_path("whole"), resumed = scratch_path("resumed"), state = scratch_path("state");
  const std::string common = "--loop custom --strategy ddp_spawn --devices 2 --steps 12 --precision " + GetParam();
  const auto saving = probe(common + " --save-at 5 --state " + state + " --out " + whole);
  ASSERT_EQ(saving.status, 0) << saving.output;
  const auto resuming = probe(common + " --resume " + state + " --out " + resumed);
  ASSERT_EQ(resuming.status, 0) << resuming.output;
  ASSERT_FALSE(read_floats(whole).empty());
  EXPECT_EQ(read_floats(resumed), read_floats(whole));
  EXPECT_EQ(report(resuming)["global_step"], 12);
  for (const auto& path : {whole, resumed, state}) std::remove(path.c_str());
}

// bf16-mixed computes in bfloat16 and keeps float32 weights, which the byte comparison reads.
INSTANTIATE_TEST_SUITE_P(DDP, CustomLoop, ::testing::Values("32-true", "bf16-mixed"), [](const auto& info) {
  return info.param == "32-true" ? std::string("Float32") : std::string("Bf16Mixed");
});

TEST(DDP, NcclOnCpuRanksIsAnErrorThatSaysWhatToSet) {
  const double timeout = 60;
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 2 --process-group-backend nccl --timeout " +
                         std::to_string(timeout));
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("process_group_backend 'nccl' needs GPU ranks, but this rank runs on cpu"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("set accelerator to \"gpu\""), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, timeout / 2) << "the error must end the run, not the timeout";
}

// One GPU: DDP of world size 1 on NCCL trains as the single-device strategy does.
TEST(DDP, CudaNcclWorldOfOneMatchesOneDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL DDP runs on a GPU only";
  if (!arc::nccl_available()) GTEST_SKIP() << "this build has no NCCL (see the configure step's warning)";
  const auto one = scratch_path("cuda_one"), ddp = scratch_path("cuda_ddp");
  const std::string common = " --accelerator gpu --devices 1 --batch 32 --steps 40";
  const auto single = probe("--strategy single_device --out " + one + common);
  ASSERT_EQ(single.status, 0) << single.output;
  const auto nccl = probe("--strategy ddp_spawn --out " + ddp + common);
  ASSERT_EQ(nccl.status, 0) << nccl.output;
  EXPECT_NE(nccl.output.find("on cuda:0"), std::string::npos) << nccl.output;
  EXPECT_NE(nccl.output.find("nccl (gloo for CPU tensors)"), std::string::npos) << nccl.output;
  ASSERT_FALSE(read_floats(one).empty());
  EXPECT_LT(max_abs_diff(read_floats(one), read_floats(ddp)), 1e-5);
  std::remove(one.c_str());
  std::remove(ddp.c_str());
}

// Two ranks on one GPU: NCCL refuses them with a clear error; Gloo on CUDA tensors trains them as
// one process with twice the batch.
TEST(DDP, CudaTwoRanksOnOneGpuNeedGloo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: Gloo on CUDA tensors runs on a GPU only";
  if (arc::nccl_available()) {
    const auto refused = probe("--strategy ddp_spawn --accelerator gpu --device-list 0,0 --steps 4");
    EXPECT_NE(refused.status, 0);
    EXPECT_NE(refused.output.find("NCCL cannot run two ranks on one GPU"), std::string::npos) << refused.output;
  }
  const auto one = scratch_path("cuda_one_gloo"), two = scratch_path("cuda_two_gloo");
  const auto single =
      probe("--strategy single_device --accelerator gpu --devices 1 --batch 32 --steps 40 --out " + one);
  ASSERT_EQ(single.status, 0) << single.output;
  const auto gloo = probe(
      "--strategy ddp_spawn --accelerator gpu --device-list 0,0 --process-group-backend gloo"
      " --batch 16 --steps 40 --out " +
      two);
  ASSERT_EQ(gloo.status, 0) << gloo.output;
  EXPECT_NE(gloo.output.find("gloo at 127.0.0.1"), std::string::npos) << gloo.output;
  EXPECT_EQ(report(gloo)["world_size"], 2);
  ASSERT_FALSE(read_floats(one).empty());
  EXPECT_LT(max_abs_diff(read_floats(one), read_floats(two)), 1e-5);
  std::remove(one.c_str());
  std::remove(two.c_str());
}

TEST(DDP, DdpWithoutALauncherSaysToUseDdpSpawn) {
  const auto run = probe("--strategy ddp --devices 2 --steps 2");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("use strategy 'ddp_spawn'"), std::string::npos) << run.output;
  // Processes started by hand: RANK and WORLD_SIZE without LOCAL_RANK, which Lightning needs too.
  const auto by_hand = probe("--strategy ddp --devices 2 --steps 2", "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1");
  EXPECT_NE(by_hand.status, 0);
  EXPECT_NE(by_hand.output.find("but LOCAL_RANK is not set (RANK or WORLD_SIZE is): processes started by hand need "
                                "LOCAL_RANK too"),
            std::string::npos)
      << by_hand.output;
}

}  // namespace
