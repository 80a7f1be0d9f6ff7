// SimpleProfiler: Lightning's "simple" profiler — per action the number of calls, mean and total
// time and its share of the stage, in a table.
#pragma once

#include <arc/profilers/profiler.h>

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

namespace arc {

/// Counts and times every action; summary() is a table sorted by total time.
class SimpleProfiler : public Profiler {
 public:
  /// The clock the actions are timed by.
  using Clock = std::chrono::steady_clock;

  /// What one action took over the stage.
  struct Totals {
    /// The times it ran.
    int64_t calls = 0;
    /// Its time over all of them.
    double total_seconds = 0;
    /// Its longest run.
    double max_seconds = 0;
  };

  void setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) override;
  /// Throws arc::Error for an action already started and not stopped.
  void start(const std::string& action) override;
  /// Throws arc::Error for an action not started.
  void stop(const std::string& action) override;
  std::string summary() const override;
  /// What each action took since setup.
  const std::unordered_map<std::string, Totals>& totals() const { return totals_; }

 protected:
  void reset() override;
  /// Called with each finished action's interval (the advanced profiler keeps them for its trace).
  virtual void recorded(const std::string& action, Clock::time_point began, Clock::time_point ended);

 private:
  struct Running {
    std::string action;
    Clock::time_point began;
  };
  /// The actions started and not stopped, innermost last: running_[0, depth_). Entries past depth_
  /// keep their strings' memory, so that starting an action allocates nothing once warm.
  std::vector<Running> running_;
  size_t depth_ = 0;
  std::unordered_map<std::string, Totals> totals_;
  Clock::time_point stage_start_ = Clock::now();
};

}  // namespace arc
