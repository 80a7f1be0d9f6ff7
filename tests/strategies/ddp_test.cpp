// DDP training with real processes: two ranks against one process with twice the batch (gradients,
// accumulation, SyncBatchNorm, all_gather, unused parameters), shared memory against Gloo, the
// probe joined by hand under strategy ddp, NCCL and CUDA.
#include <arc/base/detail/host.h>
#include <arc/strategies/detail/process_group.h>

#include "strategies/ddp_support.h"
#include "support/ports.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <thread>

namespace {

using namespace arc::testing::ddp;
using arc::testing::free_port;

void expect_parity(int64_t accumulate) {
  const std::string common = " --steps 40 --accumulate " + std::to_string(accumulate);
  CommandRun ddp;
  EXPECT_LT(weights_apart("--batch 32" + common, "--batch 16" + common, ddp), 1e-6);
  EXPECT_EQ(report(ddp)["world_size"], 2);
  EXPECT_EQ(report(ddp)["global_step"], 40);
}

// The probe's flags are a table: --help lists every scenario's settings, and a misspelt flag is an
// error before anything runs (a test that misspelt one would otherwise run another scenario).
TEST(DDPProbe, ListsItsFlagsAndRefusesUnknownOnes) {
  const auto help = probe("--help");
  ASSERT_EQ(help.status, 0) << help.output;
  for (const char* flag : {"--fail.kind", "--stall.ms", "--checkpoints.every", "--val.stream", "--custom.resume"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag << "\n" << help.output;
  const auto misspelt = probe("--strategy single_device --devices 1 --fail-rank 1 2>&1");
  EXPECT_EQ(misspelt.status, 2) << misspelt.output;
  EXPECT_NE(misspelt.output.find("ddp_probe: unknown flag '--fail-rank' (ddp_probe --help lists them)"),
            std::string::npos)
      << misspelt.output;
  EXPECT_EQ(misspelt.output.find("PROBE"), std::string::npos) << misspelt.output;
}

TEST(DDP, TwoRanksMatchOneProcessWithTwiceTheBatch) { expect_parity(1); }

TEST(DDP, TwoRanksMatchOneProcessWithGradientAccumulation) { expect_parity(2); }

// Rank 1 alone returns no loss for batch 3, which ends an optimizer step: both ranks skip that step,
// as one process skipping the same (global) batch does.
TEST(DDP, AStepOneRankSkipsIsSkippedByEveryRank) {
  for (const std::string accumulate : {"1", "2"}) {
    SCOPED_TRACE("accumulate " + accumulate);
    const std::string common = " --steps 10 --skip.batch 3 --accumulate " + accumulate;
    CommandRun ddp;
    EXPECT_LT(weights_apart("--batch 32 --skip.rank 0" + common, "--batch 16 --skip.rank 1" + common, ddp), 1e-6);
    EXPECT_NE(ddp.output.find("STOPPED 0 10"), std::string::npos) << ddp.output;
    EXPECT_NE(ddp.output.find("STOPPED 1 10"), std::string::npos) << ddp.output;
  }
  // Inside an accumulation window a rank's skipped batch only adds no gradient of its own.
  const auto inside = probe("--strategy ddp_spawn --devices 2 --steps 10 --accumulate 2 --skip.rank 1 --skip.batch 4");
  ASSERT_EQ(inside.status, 0) << inside.output;
  EXPECT_NE(inside.output.find("STOPPED 1 10"), std::string::npos) << inside.output;
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
  const auto apart = probe("--strategy ddp_spawn --devices 2 --steps 4 --freeze.rank 1");
  EXPECT_NE(apart.status, 0);
  EXPECT_NE(apart.output.find("the ranks train different parameters (parameter tensors that require gradients of "
                              "the module's 4: rank 0 4, rank 1 3); every rank must freeze and unfreeze the same"),
            std::string::npos)
      << apart.output;
  // As many on each rank, but not the same ones: the sets are compared, not only their sizes.
  const auto crossed = probe("--strategy ddp_spawn --devices 2 --steps 4 --freeze.rank 1 --freeze.bias-elsewhere 1");
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
