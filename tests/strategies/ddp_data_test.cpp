// Data across DDP ranks: user-sharded data, streams, CombinedLoader, uneven shares (even_batches),
// validation over streams, prepare_data.
#include "strategies/ddp_support.h"

#include <gtest/gtest.h>

namespace {

using namespace arc::testing::ddp;

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

// Validation over a stream of 97 samples: each rank evaluates its whole share (49 and 48), and the
// synced val_loss is the mean over all 97, as one process gives. A per-step synced value cannot
// pair up over shares of different lengths: an error on every rank that says what to log instead.
TEST(DDP, ValidationOverAStreamCountsEverySampleOfEveryRank) {
  const auto single = probe("--strategy single_device --devices 1 --batch 32 --steps 16 --val.stream 97");
  ASSERT_EQ(single.status, 0) << single.output;
  // Also through Gloo, whose threads cannot write the inference tensors of the metric sync.
  for (const std::string shared_memory : {"1", "0"}) {
    SCOPED_TRACE("shared memory " + shared_memory);
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --steps 16 --val.stream 97",
                            "--batch 16 --steps 16 --val.stream 97 --shared-memory " + shared_memory, ddp),
              1e-6);
    EXPECT_NEAR(report(ddp)["val_loss"].get<double>(), report(single)["val_loss"].get<double>(), 1e-5);
  }
  const auto per_step =
      probe("--strategy ddp_spawn --devices 2 --batch 16 --steps 16 --val.stream 97 --val.step-sync 1");
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
  const std::string uneven = "--strategy ddp_spawn --devices 2 --batch 16 --user-shard 1 --user-shard.uneven-drop 32";
  const auto refused = probe(uneven + " --steps 20");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("the ranks' training data give different batch counts in epoch 0: from 14 to 16"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("set even_batches to \"pad\""), std::string::npos) << refused.output;
  CommandRun dropped;
  EXPECT_LT(
      weights_apart("--batch 32 --steps 28 --stream 448",
                    "--batch 16 --steps 28 --user-shard 1 --user-shard.uneven-drop 32 --even-batches drop", dropped),
      1e-6);
  EXPECT_EQ(report(dropped)["global_step"], 28);
  const auto padded = probe(uneven + " --steps 32 --even-batches pad");
  ASSERT_EQ(padded.status, 0) << padded.output;
  EXPECT_NE(padded.output.find("STOPPED 0 32"), std::string::npos) << padded.output;
  EXPECT_NE(padded.output.find("STOPPED 1 32"), std::string::npos) << padded.output;
  EXPECT_EQ(report(padded)["global_step"], 32);
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

}  // namespace
