// arc::Fabric under DDP (ddp_spawn, two ranks): a hand-written loop that ends as the Trainer does,
// saved and resumed exactly, its loggers, and an exception that leaves the loop.
#include "strategies/ddp_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace arc::testing::ddp;
using arc::testing::count_tagged;

// In a user's own loop (arc::Fabric), an exception that leaves the loop ends the ranks as it
// does in a Trainer: rank 0's at once (the other rank waits for it in a collective, and waited out
// the timeout before), rank 1's as rank 0's error.
TEST(DDP, AnExceptionLeavingAFabricLoopEndsEveryRankAtOnce) {
  const double timeout = 60;
  for (const int rank : {0, 1}) {
    const std::string tag = arc::testing::process_tag("loop" + std::to_string(rank));
    const auto run = probe(
        "--strategy ddp_spawn --devices 2 --steps 200 --loop custom --fail.kind exception --fail.step 3 "
        "--fail.rank " +
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

// The same with a loop of one's own: arc::Fabric's loggers write one version, from rank 0.
TEST(DDP, AFabricsLoggersWriteOneVersionFromRankZero) {
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

class CustomLoop : public ::testing::TestWithParam<std::string> {};

TEST_P(CustomLoop, OnFabricMatchesTheTrainer) {
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

// Fabric::save on every rank (rank 0 writes) and load on every rank: a loop saved after step 5
// (mid-epoch) and resumed from that file ends as the loop that never stopped.
TEST_P(CustomLoop, SavedAndLoadedOnEveryRankResumesExactly) {
  const auto whole = scratch_path("whole"), resumed = scratch_path("resumed"), state = scratch_path("state");
  const std::string common = "--loop custom --strategy ddp_spawn --devices 2 --steps 12 --precision " + GetParam();
  const auto saving = probe(common + " --custom.save-at 5 --custom.state " + state + " --out " + whole);
  ASSERT_EQ(saving.status, 0) << saving.output;
  const auto resuming = probe(common + " --custom.resume " + state + " --out " + resumed);
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

}  // namespace
