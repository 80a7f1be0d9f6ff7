// Many runs at once on this machine: each opens its rendezvous store on a port of its own before any
// rank starts, so none clashes with another (Lightning's "Address already in use"). These start tens
// of processes, so CTest runs them alone (RUN_SERIAL): nothing timed runs beside them.
#include "support/command.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>
#include <vector>

namespace {

using arc::testing::CommandRun;
using arc::testing::run_command;

std::vector<CommandRun> run_concurrently(const std::string& command, int count) {
  std::vector<std::future<CommandRun>> runs;
  for (int i = 0; i < count; ++i)
    runs.push_back(std::async(std::launch::async, [&command] { return run_command(command); }));
  std::vector<CommandRun> done;
  for (auto& run : runs) done.push_back(run.get());
  return done;
}

// They also share one log folder: each run claims a version_N of its own (Lightning's runs may pick
// the same one and write over each other's metrics.csv).
TEST(ConcurrentRuns, TwentyDdpSpawnProgramsNeverClashOnPortsOrLogFolders) {
  constexpr int kRuns = 20;
  const auto root = arc::testing::process_scratch() / "concurrent";
  std::filesystem::remove_all(root);
  for (const auto& run :
       run_concurrently("timeout 120 " + std::string(ARC_PROBE) +
                            " --strategy ddp_spawn --devices 2 --steps 2 --timeout 90 --root " + root.string(),
                        kRuns)) {
    EXPECT_EQ(run.status, 0) << run.output;
    const auto report = arc::cli::read_report(run.output, "PROBE");
    EXPECT_EQ(report.is_object() ? report["world_size"] : nullptr, 2) << run.output;
  }
  for (int version = 0; version < kRuns; ++version) {
    const auto folder = root / "lightning_logs" / ("version_" + std::to_string(version));
    EXPECT_TRUE(std::filesystem::exists(folder / "metrics.csv")) << folder;
  }
  EXPECT_FALSE(std::filesystem::exists(root / "lightning_logs" / ("version_" + std::to_string(kRuns))));
  std::filesystem::remove_all(root);
}

// The `arc` tool's rank 0 opens its store on a free port and hands it to the other ranks.
TEST(ConcurrentRuns, EightArcToolRunsNeverClash) {
  const std::string command = std::string(ARC_BINARY) + " train --config " + ARC_SOURCE_DIR +
                              "/apps/configs/mlp_ddp_spawn.json --set trainer.limit_train_batches=3 " +
                              "--set trainer.limit_val_batches=1 --set trainer.enable_progress_bar=false " +
                              "--set trainer.enable_checkpointing=false --set trainer.logger=false";
  for (const auto& run : run_concurrently(command, 8)) {
    EXPECT_EQ(run.status, 0) << run.output;
    EXPECT_NE(run.output.find("\"world_size\":2"), std::string::npos) << run.output;
  }
}

}  // namespace
