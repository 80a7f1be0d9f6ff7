// StragglerMonitor.
#include <arc/core/detail/straggler_monitor.h>

#include <arc/base/console.h>
#include <arc/base/detail/host.h>
#include <arc/strategies/collectives.h>

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

namespace arc {
namespace {

// The lower median: for two ranks the faster one, so that one slow rank of two shows.
double lower_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

}  // namespace

void StragglerMonitor::add(double fetch_s, double step_s, double blocked_s) {
  fetch_s_ += fetch_s;
  own_ms_.push_back(std::max(0.0, step_s - blocked_s) * 1000.0);
}

Metrics StragglerMonitor::report() {
  constexpr double kSlower = 1.2;
  constexpr int64_t kIntervals = 3;
  const double own_s = std::accumulate(own_ms_.begin(), own_ms_.end(), 0.0) / 1000.0;
  const double mine[3] = {own_ms_.empty() ? 0.0 : lower_median(own_ms_),
                          own_ms_.empty() ? 0.0 : *std::max_element(own_ms_.begin(), own_ms_.end()),
                          fetch_s_ + own_s > 0 ? fetch_s_ / (fetch_s_ + own_s) : 0.0};
  const auto interval_steps = static_cast<int64_t>(own_ms_.size());
  own_ms_.clear();
  fetch_s_ = 0;
  const CollectiveName name("straggler statistics");
  const auto gathered = group_.all_gather(torch::tensor({mine[0], mine[1], mine[2]}, torch::kDouble));
  std::vector<double> medians;
  for (const auto& rank : gathered) medians.push_back(rank[0].item<double>());
  const auto slowest = std::max_element(medians.begin(), medians.end()) - medians.begin();
  const double median = lower_median(medians);
  const double ratio = median > 0 ? medians[static_cast<size_t>(slowest)] / median : 1.0;
  if (ratio >= kSlower) {
    streak_ = slowest == slow_rank_ ? streak_ + 1 : 1;
    slow_rank_ = slowest;
  } else {
    streak_ = 0;
  }
  if (streak_ >= kIntervals && !warned_) {
    warned_ = true;
    if (slowest == group_.rank()) {
      const double data_share = mine[2];
      console().warn(
          "rank {} on {} has been at least {:.0f}% slower than the median rank for {} intervals of {} steps: its own "
          "step time (waits for the other ranks left out) is {:.1f} ms (at most {:.1f}) against {:.1f} ms, {:.0f}% of "
          "its time spent fetching data; {}",
          slowest, host_name(), (kSlower - 1) * 100, kIntervals, interval_steps, mine[0], mine[1], median,
          data_share * 100,
          data_share >= 0.5 ? "it waits on its data (more num_workers, faster storage)"
                            : "it computes more slowly (a slower or busier CPU or GPU)");
    }
  }
  return {{"perf/step_ms_max_over_median", ratio}, {"perf/slowest_rank", static_cast<double>(slowest)}};
}

}  // namespace arc
