// Checkpoints under DDP: "last" as rank 0 chooses it, failed saves in the foreground and background,
// background saves that train as synchronous ones do.
#include <arc/fabric/checkpoint.h>

#include "strategies/ddp_support.h"
#include "support/ports.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

namespace {

using namespace arc::testing::ddp;
using arc::testing::count_tagged;
using arc::testing::free_port;

// fit(ckpt_path="last") on ranks whose disks differ: rank 0's folder holds last.ckpt, rank 1's none
// (rank 0 alone writes checkpoints). Every rank takes rank 0's choice and resumes from its file, so
// both train the same steps; a rank that started afresh would fail the run at the first collective.
TEST(DDP, LastIsRankZerosChoiceOnEveryRank) {
  const auto root = scratch_path("last_per_rank");
  std::filesystem::remove_all(root);
  const std::string common =
      "--strategy ddp_spawn --devices 2 --checkpoints.every 4 --checkpoints.save-last 1 --root-per-rank 1 --root " +
      root;
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
      probe("--strategy ddp_spawn --devices 2 --steps 100 --checkpoints.every 5 --small-disk.bytes 1024 --root " +
            root + " --timeout " + std::to_string(timeout) + " --tag " + tag);
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
  const std::string args = "--strategy ddp --devices 2 --steps 200 --checkpoints.every 5 --small-disk.bytes 1024 " +
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
    const auto run = probe("--strategy ddp_spawn --devices 2 --steps 30 --checkpoints.every 5 --async-checkpoint " +
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

}  // namespace
