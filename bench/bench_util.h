// Helpers shared by the bench apps: the environment header and timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <arc/cli/config_file.h>
#include <arc/base/error.h>

#include "support/python.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace arc::bench {

/// Which CPU BLAS libraries this process maps (from /proc/self/maps), e.g. openblas-openmp; a
/// CUDA LibTorch's cuBLAS is not one of them.
inline std::string mapped_blas() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const bool blas = path.find("blas") != std::string::npos || path.find("mkl") != std::string::npos;
    if (blas && path.find("cublas") == std::string::npos) found.insert(path);
  }
  std::string out;
  for (const auto& path : found) out += (out.empty() ? "" : ", ") + path;
  return out.empty() ? "none mapped on its own (linked into LibTorch, as MKL is in a pip PyTorch)" : out;
}

inline void print_header(const std::string& title) {
  std::cout << "== " << title << " ==\n"
            << "LibTorch " << TORCH_VERSION << ", intra-op threads " << torch::get_num_threads() << "\n"
            << "BLAS mapped: " << mapped_blas() << "\n\n";
}

/// A command-line argument the bench cannot take; `failed` says so and returns 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What a bench's `main` returns when it throws: it says so, naming the bench and the cause, and
/// exits non-zero (not through std::terminate): 2 for an argument it cannot take, else 1.
inline int failed(const char* bench, const std::exception& error) {
  std::cout << std::flush;
  if (dynamic_cast<const UsageError*>(&error) != nullptr) {
    std::cerr << bench << ": " << error.what() << "\n";
    return 2;
  }
  std::cerr << bench << " failed: " << error.what() << "\n";
  return 1;
}

/// Argument `index` as a whole number of at least `least`; `fallback` where it is not given.
inline int64_t whole_arg(int argc, char** argv, int index, const std::string& name, int64_t fallback,
                         int64_t least = 1) {
  if (index >= argc) return fallback;
  const std::string text = argv[index];
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < least)
    throw UsageError(name + " must be a whole number of at least " + std::to_string(least) + ", got '" + text + "'");
  return value;
}

/// Argument `index` as a comma-separated list of names from `known`; `fallback` where it is not given.
inline std::vector<std::string> names_arg(int argc, char** argv, int index, const std::string& name,
                                          const std::vector<std::string>& known, const std::string& fallback) {
  const std::string text = index < argc ? argv[index] : fallback;
  std::vector<std::string> names;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    names.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (std::find(known.begin(), known.end(), names.back()) == known.end())
      throw UsageError(unknown_name_message(name, names.back(), known));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

/// Whether `names` holds `name`.
inline bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

inline double seconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// The last `count` lines of `text`.
inline std::string last_lines(const std::string& text, int count) {
  size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  for (int i = 0; i < count && at != std::string::npos && at > 0; ++i) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at + 1);
}

/// Reads the output of `command`, started by popen, to its end; the JSON of its RESULT line. A command
/// that fails or prints none is an error with its exit status and its last lines, which say why.
inline nlohmann::json result_from(FILE* pipe, const std::string& command) {
  if (pipe == nullptr) throw std::runtime_error("could not start: " + command);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  auto result = cli::read_report(output);
  if (status != 0 || result.is_null()) {
    const std::string ended = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                  : "exit status " + std::to_string(WEXITSTATUS(status));
    throw std::runtime_error("no RESULT line from: " + command + "\n(" + ended + "; its last lines:)\n" +
                             last_lines(output, 20));
  }
  return result;
}

/// Starts `command`, its standard error with its output, to be read by result_from.
inline FILE* start_command(const std::string& command) { return popen((command + " 2>&1").c_str(), "r"); }

/// A folder of this bench process's own, removed when it exits: the default_root_dir of the runs it
/// makes, so that their logs and checkpoints are not left in the folder the bench was started from.
inline const std::string& scratch_root() {
  struct Folder {
    std::string path = (std::filesystem::temp_directory_path() / ("arc_bench_" + std::to_string(getpid()))).string();
    ~Folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Folder folder;
  return folder.path;
}

#ifdef ARC_BINARY
/// `arc train` on `accelerator` with `threads` intra-op threads and no progress bar, writing into
/// scratch_root(): how every bench starts a fresh run of the canonical workload. The accelerator is
/// named, as "auto" would take a GPU.
inline std::string arc_train(const std::string& accelerator = "cpu", int threads = 1) {
  return std::string(ARC_BINARY) + " train --set trainer.accelerator=" + accelerator +
         " --set trainer.num_threads=" + std::to_string(threads) +
         " --set trainer.enable_progress_bar=false --set trainer.default_root_dir=" + scratch_root();
}
#endif

/// Runs `command` (an `arc train ...`) and returns the JSON of its RESULT line.
inline nlohmann::json result_of(const std::string& command) { return result_from(start_command(command), command); }

/// One fresh command's RESULT line and its wall time.
struct Result {
  nlohmann::json json;
  double wall_s = 0;
};

inline double unix_now() {
  timeval now{};
  gettimeofday(&now, nullptr);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_usec) * 1e-6;
}

/// Runs `command` with BENCH_T0 set just before it starts; returns its RESULT line.
inline Result run(const std::string& command) {
  const double start = unix_now();
  std::ostringstream full;
  full << std::fixed << std::setprecision(6) << "BENCH_T0=" << start << " " << command;
  Result result;
  result.json = result_of(full.str());
  result.wall_s = unix_now() - start;
  return result;
}

/// Runs `copies` instances of `command` at once, sharing the machine and nothing else; returns the
/// first one's RESULT line with train_sps replaced by the sum over all copies, and the wall time of
/// them all: what the machine gives independent processes, the ceiling for data parallelism.
inline Result run_together(const std::string& command, int copies) {
  const double start = unix_now();
  std::vector<FILE*> pipes;
  for (int i = 0; i < copies; ++i) pipes.push_back(start_command(command));
  Result result;
  double sum = 0;
  double slowest = std::numeric_limits<double>::infinity();
  std::string failure;
  for (FILE* pipe : pipes) {  // every copy is waited for, even after one failed
    try {
      const auto json = result_from(pipe, command);
      sum += json["train_sps"].get<double>();
      slowest = std::min(slowest, json["train_sps"].get<double>());
      if (result.json.is_null()) result.json = json;
    } catch (const std::runtime_error& error) {
      failure = error.what();
    }
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  result.json["train_sps"] = sum;
  // What copies that had to keep in step would reach: every one at the slowest one's pace.
  result.json["in_step_sps"] = slowest * copies;
  result.wall_s = unix_now() - start;
  return result;
}

/// A table row: the runs of one command, summarised by medians.
struct Row {
  std::string name;
  std::vector<Result> runs;
  double sps() const { return median(all_sps()); }
  /// (slowest - fastest) / median of the runs' samples/s: how much the machine moved between runs.
  double sps_spread() const {
    const auto v = all_sps();
    const auto [low, high] = std::minmax_element(v.begin(), v.end());
    return (*high - *low) / median(v);
  }
  std::vector<double> all_sps() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.json["train_sps"].get<double>());
    return v;
  }
  double first_step() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.json["t_first_step_s"].get<double>());
    return median(v);
  }
  double wall() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.wall_s);
    return median(v);
  }
};

/// One row of a table of bench/RESULTS.md: the figures of this invocation that
/// scripts/bench-results.sh keeps, printed as one "SUMMARY {json}" line (the table's name and its
/// columns in order) after the bench's own table.
class Summary {
 public:
  /// A figure this invocation did not measure (a framework that does not import, say).
  static constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();
  explicit Summary(std::string table) : table_(std::move(table)) {}
  /// A figure, rounded to `decimals`; kNotMeasured reads "-".
  Summary& add(const std::string& column, double value, int decimals) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(decimals) << value;
    return add(column, std::isnan(value) ? "-" : text.str());
  }
  Summary& add(const std::string& column, const std::string& text) {
    columns_.push_back({column, text});
    return *this;
  }
  void print() const {
    std::cout << "SUMMARY " << nlohmann::json{{"table", table_}, {"columns", columns_}}.dump() << std::endl;
  }

 private:
  std::string table_;
  nlohmann::json columns_ = nlohmann::json::array();
};

}  // namespace arc::bench
