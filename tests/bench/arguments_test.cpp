// The bench apps' command lines: an argument a bench cannot take is one line naming it and exit
// status 2, before anything runs (a repeat count of 0 or a word once crashed them on an empty
// median, and an unknown model ran nothing and exited 0).
#include "support/command.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace {

TEST(BenchArguments, AnArgumentABenchCannotTakeIsNamedWithExitStatus2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"arc_bench_ddp x", "arc_bench_ddp: repeats must be a whole number of at least 1, got 'x'"},
      {"arc_bench_ddp 3 resnet", "arc_bench_ddp: unknown model 'resnet'; known: mlp, cnn"},
      {"arc_bench_allreduce 0", "arc_bench_allreduce: iterations must be a whole number of at least 1, got '0'"},
      {"arc_bench_allreduce 10 shm,nccl",
       "arc_bench_allreduce: unknown backend 'nccl'; known: shm, buffer, written, copy, exchange, gloo"},
      {"arc_bench_checkpoint /nonexistent",
       "arc_bench_checkpoint: folder '/nonexistent' is not a directory; give one it can write its test files in"},
      {"arc_bench_checkpoint /tmp 1", "arc_bench_checkpoint: repeats must be a whole number of at least 2, got '1'"},
      {"arc_bench_trainer 1 2x", "arc_bench_trainer: cnn_steps must be a whole number of at least 1, got '2x'"},
      {"arc_bench_precision 1 mlp 0", "arc_bench_precision: threads must be a whole number of at least 1, got '0'"},
      {"arc_bench_launchers q", "arc_bench_launchers: runs must be a whole number of at least 1, got 'q'"},
      {"arc_bench_frameworks tpu", "arc_bench_frameworks: accelerator must be gpu or cpu, got 'tpu'"},
      {"arc_bench_frameworks cpu 1 mlp,", "arc_bench_frameworks: unknown model ''; known: mlp, cnn"},
  };
  for (const auto& [args, error] : cases) {
    const auto run = arc::testing::run_command("timeout 60 " + std::string(ARC_BENCH_DIR) + "/" + args);
    EXPECT_EQ(run.status, 2) << args << ": " << run.output;
    EXPECT_NE(run.output.find(error), std::string::npos) << args << ": " << run.output;
  }
}

// A bench that fails on the way says so and exits 1: the checkpoint bench's plain-file baseline
// once wrote through a null FILE* where it could not create its file (exit 139).
TEST(BenchArguments, ABenchThatCannotWriteItsFilesSaysSo) {
  const auto run =
      arc::testing::run_command("timeout 120 " + std::string(ARC_BENCH_DIR) + "/arc_bench_checkpoint /proc 2");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("arc_bench_checkpoint failed: cannot open /proc/arc_bench_plain.bin"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("; give the bench a folder it can write as its first argument"), std::string::npos)
      << run.output;
}

}  // namespace
