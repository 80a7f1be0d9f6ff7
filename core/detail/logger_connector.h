// LoggerConnector: the metrics of a run — the metric stores that module.log() fills, what callbacks
// and the progress bar read, and what goes to the loggers (rank 0 writes, every rank agrees on the
// loggers' versions).
#pragma once

#include <arc/core/metric_store.h>
#include <arc/fabric/detail/run_loggers.h>
#include <arc/loggers/logger.h>

#include <memory>
#include <optional>
#include <vector>

namespace arc {

class Profiler;
class Strategy;
struct Progress;

namespace detail {

class LoggerConnector : public RunLoggers {
 public:
  using RunLoggers::RunLoggers;

  /// Values logged in training steps and hooks, and in evaluation.
  MetricStore train_metrics;
  MetricStore eval_metrics;

  /// Every metric callbacks may monitor: step values, epoch values.
  const Metrics& callback_metrics() const;
  void clear_callback_metrics() { callback_metrics_.clear(); }
  /// What callback_metrics() held when a checkpoint was written, for the fit that resumes from it:
  /// hooks after that point (an epoch's end) monitor what they would have.
  void restore_callback_metrics(Metrics metrics) { callback_metrics_ = std::move(metrics); }
  Metrics progress_bar_metrics() const;
  /// What was last sent to the loggers.
  const Metrics& logged_metrics() const { return logged_metrics_; }
  /// The loggers' step while a training batch runs (the stepped batches before it) and at an
  /// epoch's end (the last one's index), as Lightning's; unset, Progress::stepped_batches.
  std::optional<int64_t> held_step;
  /// Sends `metrics` (and the epoch) to the loggers at the current step (or `step`), on rank 0.
  void send(const Metrics& metrics, const Progress& progress, std::optional<int64_t> step = std::nullopt);
  /// Gathers metric values across ranks, or nullptr with one process.
  GatherFn gather() const;
  /// How an on_step value logged with sync_dist is synced at its log call, as Lightning's (the
  /// callbacks after it in the same hook see the ranks' value): set by the loops while they run
  /// hooks (through a Swapped), null inside a step, whose values the loop syncs in one collective as soon as
  /// it returns, and outside the loops.
  GatherFn sync_at_log;
  /// Reduces the on_step values with sync_dist that wait in `store` with `gather`, in one collective
  /// timed as "[LoggerConnector].sync_step_values"; nothing when none wait or without `gather`.
  void sync_step_values(MetricStore& store, const GatherFn& gather, Profiler* profiler);

 private:
  mutable Metrics callback_metrics_;
  Metrics logged_metrics_;
};

}  // namespace detail
}  // namespace arc
