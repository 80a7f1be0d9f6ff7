// Helpers of the DDP tests: running the probe program (ddp_probe.cpp), reading what it wrote and
// printed.
#pragma once

#include "support/command.h"
#include "support/scratch.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace arc::testing::ddp {

using arc::testing::CommandRun;

inline CommandRun probe(const std::string& args, const std::string& env = "") {
  return arc::testing::run_command(env + " timeout 120 " + std::string(ARC_PROBE) + " " + args);
}

inline nlohmann::json report(const CommandRun& run) { return arc::cli::read_report(run.output, "PROBE"); }

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values;
  float v;
  while (in.read(reinterpret_cast<char*>(&v), 4)) values.push_back(v);
  return values;
}

inline std::string scratch_path(const std::string& name) {
  return (arc::testing::process_scratch() / ("ddp_test_" + name)).string();
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

// Trains in one process and on two ranks (ddp_spawn), each with its own arguments; the largest
// difference between their final parameters. `ddp` gets the two-rank run.
inline double weights_apart(const std::string& single_args, const std::string& ddp_args, CommandRun& ddp) {
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

// What the loggers wrote in `dir`/lightning_logs: "<version>/<file name's first 20 characters>", sorted.
inline std::vector<std::string> logged_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& version : std::filesystem::directory_iterator(dir + "/lightning_logs"))
    for (const auto& entry : std::filesystem::directory_iterator(version.path()))
      files.push_back(version.path().filename().string() + "/" + entry.path().filename().string().substr(0, 20));
  std::sort(files.begin(), files.end());
  return files;
}

// Runs the probe with loggers writing under `dir` (emptied first) and expects one version, written
// by rank 0 alone: one metrics file, one events file, the hyper-parameters.
inline void expect_one_version_from_rank_zero(const std::string& args, const std::string& dir) {
  std::filesystem::remove_all(dir);
  const auto run = probe(args + " --loggers " + dir);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(logged_files(dir), (std::vector<std::string>{"version_0/events.out.tfevents.", "version_0/hparams.yaml",
                                                         "version_0/metrics.csv"}))
      << run.output;
}

// Every "<tag> <rank> <value>" line ("STOPPED 1 7"), as rank -> its values in order.
template <typename Value = int64_t>
inline std::map<int64_t, std::vector<Value>> all_per_rank(const std::string& output, const std::string& tag) {
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
inline std::map<int64_t, Value> per_rank(const std::string& output, const std::string& tag) {
  std::map<int64_t, Value> last;
  for (const auto& [rank, values] : all_per_rank<Value>(output, tag)) last[rank] = values.back();
  return last;
}

// The probe under ddp_spawn on two ranks, with `args`.
inline CommandRun two_ranks(const std::string& args) {
  return probe("--strategy ddp_spawn --devices 2 --timeout 60 " + args);
}

// "BEST <rank> <path> <score, or none>" of every rank: what its ModelCheckpoint kept as the best.
inline std::map<int64_t, std::pair<std::string, std::string>> best_per_rank(const std::string& output) {
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

inline std::vector<std::string> files_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace arc::testing::ddp
