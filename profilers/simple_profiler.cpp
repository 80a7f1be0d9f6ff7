// SimpleProfiler.
#include <arc/profilers/simple_profiler.h>

#include <arc/base/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace arc {

void SimpleProfiler::setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) {
  Profiler::setup(stage, dirpath, global_rank);
  reset();
}

void SimpleProfiler::reset() {
  depth_ = 0;
  totals_.clear();
  stage_start_ = Clock::now();
}

void SimpleProfiler::start(const std::string& action) {
  for (size_t i = 0; i < depth_; ++i)
    ARC_CHECK(running_[i].action != action, "the profiler's action '", action, "' started again before it stopped; ",
              "stop it first, or give the inner one another name");
  if (depth_ == running_.size()) running_.emplace_back();
  auto& entry = running_[depth_++];
  entry.action.assign(action);
  entry.began = Clock::now();
}

// Actions nest, so the one stopping is nearly always the innermost; another is taken out of the middle.
void SimpleProfiler::stop(const std::string& action) {
  const auto ended = Clock::now();
  size_t at = depth_;
  while (at > 0 && running_[at - 1].action != action) --at;
  ARC_CHECK(at > 0, "the profiler's action '", action, "' stopped without starting; ", "call start(\"", action,
            "\") before stop");
  const auto began = running_[at - 1].began;
  std::rotate(running_.begin() + static_cast<std::ptrdiff_t>(at - 1),
              running_.begin() + static_cast<std::ptrdiff_t>(at),
              running_.begin() + static_cast<std::ptrdiff_t>(depth_));
  --depth_;
  auto& totals = totals_[action];
  const double seconds = std::chrono::duration<double>(ended - began).count();
  ++totals.calls;
  totals.total_seconds += seconds;
  totals.max_seconds = std::max(totals.max_seconds, seconds);
  recorded(action, began, ended);
}

void SimpleProfiler::recorded(const std::string&, Clock::time_point, Clock::time_point) {}

// Lightning's table: one row per action, the most costly first, after the stage's own total.
std::string SimpleProfiler::summary() const {
  const double stage_seconds = std::chrono::duration<double>(Clock::now() - stage_start_).count();
  std::vector<std::pair<std::string, Totals>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_seconds > b.second.total_seconds; });
  size_t width = 6;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  const auto line = [&](const std::string& action, const std::string& mean, const std::string& calls,
                        const std::string& max, const std::string& total, const std::string& share) {
    return fmt::format("| {:<{}} | {:>14} | {:>9} | {:>13} | {:>13} | {:>8} |\n", action, width, mean, calls, max,
                       total, share);
  };
  std::string text = line("Action", "Mean (ms)", "Calls", "Max (ms)", "Total (s)", "Share %");
  text += "|" + std::string(width + 2, '-') + "|" + std::string(16, '-') + "|" + std::string(11, '-') + "|" +
          std::string(15, '-') + "|" + std::string(15, '-') + "|" + std::string(10, '-') + "|\n";
  text += line("Total", "-", "-", "-", fmt::format("{:.6f}", stage_seconds), "100.0");
  for (const auto& [action, totals] : rows)
    text += line(action, fmt::format("{:.5f}", 1e3 * totals.total_seconds / static_cast<double>(totals.calls)),
                 std::to_string(totals.calls), fmt::format("{:.5f}", 1e3 * totals.max_seconds),
                 fmt::format("{:.6f}", totals.total_seconds),
                 fmt::format("{:.1f}", stage_seconds > 0 ? 100.0 * totals.total_seconds / stage_seconds : 0.0));
  return text;
}

}  // namespace arc
