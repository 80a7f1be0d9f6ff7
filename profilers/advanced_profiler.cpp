// AdvancedProfiler: LibTorch's legacy autograd profiler (CPU events; it is in LibTorch 1.13 and 2.x
// alike) over a window of training batches.
#include <arc/profilers/advanced_profiler.h>

#include <arc/base/error.h>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <unordered_map>

namespace arc {
namespace {

namespace legacy = torch::autograd::profiler;

// One complete event ("ph": "X") of a Chrome trace; times in microseconds.
nlohmann::json trace_event(const std::string& name, const char* category, double start, double duration,
                           int64_t process, const nlohmann::json& thread) {
  return {{"name", name},    {"cat", category}, {"ph", "X"},    {"ts", start},
          {"dur", duration}, {"pid", process},  {"tid", thread}};
}

}  // namespace

// What the open window collects: when it opened, the batches it has left, and Arclight's actions.
struct AdvancedProfiler::Window {
  SimpleProfiler::Clock::time_point opened = SimpleProfiler::Clock::now();
  int64_t batches_left = 0;
  nlohmann::json actions = nlohmann::json::array();
};

AdvancedProfiler::AdvancedProfiler(Options options) : options_(options) {
  ARC_CHECK(options_.first_batch() >= 0 && options_.batches() >= 1, "AdvancedProfiler needs first_batch >= 0 and ",
            "batches >= 1, got first_batch=", options_.first_batch(), " and batches=", options_.batches());
}

AdvancedProfiler::~AdvancedProfiler() {
  if (window_) legacy::disableProfilerLegacy();
}

void AdvancedProfiler::setup(const std::string& stage, const std::string& dirpath, int64_t global_rank) {
  SimpleProfiler::setup(stage, dirpath, global_rank);
  batches_seen_ = 0;
}

void AdvancedProfiler::reset() {
  SimpleProfiler::reset();
  operators_.clear();
}

void AdvancedProfiler::start(const std::string& action) {
  if (action == kTrainingBatchAction && !window_ && batches_seen_++ == options_.first_batch()) open_window();
  SimpleProfiler::start(action);
}

void AdvancedProfiler::stop(const std::string& action) {
  SimpleProfiler::stop(action);
  if (action == kTrainingBatchAction && window_ && --window_->batches_left == 0) close_window();
}

void AdvancedProfiler::recorded(const std::string& action, Clock::time_point began, Clock::time_point ended) {
  if (!window_ || began < window_->opened) return;
  const auto micros = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  window_->actions.push_back(trace_event(action, "arclight", micros(began - window_->opened), micros(ended - began),
                                         global_rank(), "arclight"));
}

void AdvancedProfiler::open_window() {
  window_ = std::make_unique<Window>();
  window_->batches_left = options_.batches();
  legacy::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
}

// Pairs each operator's push and pop by their handle, sums the operators by name and writes the trace.
void AdvancedProfiler::close_window() {
  const auto threads = legacy::disableProfilerLegacy();
  auto window = std::move(window_);
  std::unordered_map<uint64_t, const legacy::LegacyEvent*> pushed;
  const legacy::LegacyEvent* first = nullptr;
  for (const auto& events : threads)
    for (const auto& event : events) {
      if (first == nullptr || event.cpuUs() < first->cpuUs()) first = &event;
      if (event.kind() == legacy::EventKind::PushRange) pushed[event.handle()] = &event;
    }
  std::unordered_map<std::string, Operator> by_name;
  nlohmann::json trace = std::move(window->actions);
  for (const auto& events : threads)
    for (const auto& event : events) {
      if (event.kind() != legacy::EventKind::PopRange) continue;
      const auto push = pushed.find(event.handle());
      if (push == pushed.end()) continue;
      const auto& begin = *push->second;
      const double micros = begin.cpuElapsedUs(event);
      auto& op = by_name[begin.name()];
      op.name = begin.name();
      ++op.calls;
      op.total_us += micros;
      trace.push_back(
          trace_event(op.name, "operator", begin.cpuUs() - first->cpuUs(), micros, global_rank(), begin.threadId()));
    }
  for (auto& entry : by_name) operators_.push_back(std::move(entry.second));
  std::sort(operators_.begin(), operators_.end(), [](const auto& a, const auto& b) { return a.total_us > b.total_us; });
  if (!options_.chrome_trace()) return;
  trace_path_ = output_path("trace", "json");
  std::ofstream out(trace_path_);
  out << nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump();
  ARC_CHECK(out.flush(), "cannot write the Chrome trace '", trace_path_, "'; free space or make the folder writable");
}

std::string AdvancedProfiler::summary() const {
  std::string text = SimpleProfiler::summary();
  if (operators_.empty())
    return text +
           fmt::format("\nNo LibTorch operators were recorded: the window opens at training batch {} of a fit.\n",
                       options_.first_batch());
  size_t width = 8;
  const size_t rows = std::min(operators_.size(), static_cast<size_t>(std::max<int64_t>(options_.row_limit(), 0)));
  for (size_t i = 0; i < rows; ++i) width = std::max(width, operators_[i].name.size());
  text +=
      fmt::format("\nLibTorch operators over {} training batch(es) from batch {} (time includes nested operators)\n",
                  options_.batches(), options_.first_batch());
  text += fmt::format("| {:<{}} | {:>9} | {:>13} | {:>13} |\n", "Operator", width, "Calls", "Total (ms)", "Mean (us)");
  for (size_t i = 0; i < rows; ++i) {
    const auto& op = operators_[i];
    text += fmt::format("| {:<{}} | {:>9} | {:>13.3f} | {:>13.2f} |\n", op.name, width, op.calls, op.total_us / 1e3,
                        op.total_us / static_cast<double>(op.calls));
  }
  if (!trace_path_.empty()) text += "Chrome trace: " + trace_path_ + "\n";
  return text;
}

void AdvancedProfiler::describe() {
  if (window_) close_window();
  Profiler::describe();
}

}  // namespace arc
