// AdvancedProfiler: the simple profiler's table, plus LibTorch's autograd profiler over a window of
// training batches — the operators it ran (calls, total and mean time) and a Chrome trace of the
// window (chrome://tracing or Perfetto) with Arclight's actions beside the operators.
#pragma once

#include <arc/base/arg.h>
#include <arc/profilers/simple_profiler.h>

#include <memory>
#include <string>
#include <vector>

namespace arc {

/// SimpleProfiler with LibTorch's operators over `batches` training batches from `first_batch`.
class AdvancedProfiler : public SimpleProfiler {
 public:
  /// Which training batches the operator window covers, and what it writes.
  class Options {
    /// Training batches of the fit run before the window opens (the first ones warm up).
    ARC_ARG(int64_t, first_batch) = 1;
    /// Training batches in the window.
    ARC_ARG(int64_t, batches) = 3;
    /// Also write `<dirpath>/<stage>-trace.json` (`<stage>-<filename>-trace.json` after set_output).
    ARC_ARG(bool, chrome_trace) = true;
    /// Operators listed in the summary, the most costly first.
    ARC_ARG(int64_t, row_limit) = 25;
  };

  /// A profiler whose window and outputs `options` set.
  explicit AdvancedProfiler(Options options);
  AdvancedProfiler() : AdvancedProfiler(Options()) {}
  ~AdvancedProfiler() override;

  void setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) override;
  void start(const std::string& action) override;
  void stop(const std::string& action) override;
  std::string summary() const override;
  void describe() override;
  /// The Chrome trace's path once written ("" before).
  const std::string& trace_path() const { return trace_path_; }

 protected:
  void reset() override;
  void recorded(const std::string& action, Clock::time_point began, Clock::time_point ended) override;

 private:
  struct Window;
  struct Operator {
    std::string name;
    int64_t calls = 0;
    double total_us = 0;
  };
  void open_window();
  void close_window();

  Options options_;
  int64_t batches_seen_ = 0;
  std::unique_ptr<Window> window_;
  std::vector<Operator> operators_;
  std::string trace_path_;
};

}  // namespace arc
