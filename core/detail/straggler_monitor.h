// StragglerMonitor: names a rank that holds the others back. Every log_every_n_steps steps, one
// small all-gather of each rank's own step time (median and max, collective waits excluded) and the
// share of it spent fetching data; no other collective.
#pragma once

#include <arc/core/metric_store.h>

#include <cstdint>
#include <vector>

namespace arc {

class Collectives;

class StragglerMonitor {
 public:
  explicit StragglerMonitor(Collectives& group) : group_(group) {}

  /// One batch: seconds fetching it, seconds in its step, and of those blocked in collectives.
  void add(double fetch_s, double step_s, double blocked_s);
  /// At a logging step, on every rank: the interval's figures of all ranks as metrics
  /// (perf/step_ms_max_over_median, perf/slowest_rank); once a rank stays >= 20% slower than the
  /// median rank for three intervals, that rank warns, naming itself, its host and the cause.
  Metrics report();

 private:
  Collectives& group_;
  std::vector<double> own_ms_;
  double fetch_s_ = 0;
  int64_t slow_rank_ = -1;
  int64_t streak_ = 0;
  bool warned_ = false;
};

}  // namespace arc
