// Metrics and loggers across DDP ranks: sync_dist, log_dict in hooks, names that differ by rank,
// loggers that write one version from rank 0, straggler reports.
#include <arc/base/detail/host.h>

#include "strategies/ddp_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace arc::testing::ddp;

TEST(DDP, SyncDistReducesEveryMetricAcrossRanks) {
  const auto run = probe("--strategy ddp_spawn --devices 2 --steps 8");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto metrics = report(run);
  EXPECT_DOUBLE_EQ(metrics["rank_mean_epoch"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(metrics["rank_max_epoch"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(metrics["rank_min_epoch"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(metrics["rank_sum"].get<double>(), 8.0);  // 8 steps x (0 + 1)
}

// A value whose name holds the rank, logged with sync_dist: the ranks sync as many values under other
// names, which they would add into each other; instead every rank fails at the first step's sync.
TEST(DDP, RanksThatSyncOtherNamesFailTogether) {
  const double timeout = 60;
  const auto run =
      probe("--strategy ddp_spawn --devices 2 --steps 8 --log.rank-named 1 --timeout " + std::to_string(timeout));
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("the values logged with sync_dist=True have other names on rank 1 than here (rank_0, "
                            "rank_max, rank_mean, rank_min)"),
            std::string::npos)
      << run.output;
  EXPECT_LT(run.seconds, timeout / 2) << run.output;
  // So in a user's own loop: Fabric::all_reduce_dict of a map whose name holds the rank.
  const auto own_loop = probe("--strategy ddp_spawn --devices 2 --steps 8 --loop custom --log.rank-named 1 --timeout " +
                              std::to_string(timeout));
  EXPECT_EQ(own_loop.status, 1) << own_loop.output;
  EXPECT_NE(
      own_loop.output.find("all_reduce of a map: another rank's map has other names than this rank's (loss_rank0)"),
      std::string::npos)
      << own_loop.output;
  EXPECT_LT(own_loop.seconds, timeout / 2) << own_loop.output;
}

// Loggers built in main exist on every rank, but only rank 0 writes, into the one version that
// every rank agrees on: one version_0 with one metrics file and one events file.
TEST(DDP, LoggersBuiltInMainWriteOneVersionFromRankZero) {
  const auto dir = scratch_path("loggers");
  ASSERT_NO_FATAL_FAILURE(expect_one_version_from_rank_zero("--strategy ddp_spawn --devices 2 --steps 20", dir));
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
      "--strategy ddp_spawn --devices 2 --steps 30 --log-every 5 --slow.rank 1 --slow.ms 20 "
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
    const auto run = two_ranks(std::string("--steps 6 --log-every 1000 --log.from-hooks 1 --watch ") + name);
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
      two_ranks("--steps 6 --log-every 1000 --log.from-hooks 1 --watch end_rank --watch.count-syncs 1 --root " + root);
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
      two_ranks("--steps 6 --val.every 3 --max-time 3600 --log-every 1000 --log.from-hooks 1 --watch val_end_rank");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto seen = all_per_rank<double>(run.output, "VALIDATION");
  ASSERT_EQ(seen.size(), 2u) << run.output;
  EXPECT_EQ(seen.at(0).size(), 4u) << run.output;
  EXPECT_EQ(seen.at(0), seen.at(1)) << run.output;
  for (const double value : seen.at(0)) EXPECT_EQ(value, 0.5) << run.output;
}

}  // namespace
