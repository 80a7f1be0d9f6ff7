// LoggerConnector.
#include <arc/core/detail/logger_connector.h>

#include <arc/core/trainer.h>
#include <arc/metrics/metric.h>
#include <arc/profilers/profiler.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

namespace arc::detail {

const Metrics& LoggerConnector::callback_metrics() const {
  // Step values are read lazily: converting them every step would cost a sync per metric.
  for (const auto& [name, value] : train_metrics.callback_metrics()) callback_metrics_[name] = value;
  for (const auto& [name, value] : eval_metrics.callback_metrics()) callback_metrics_[name] = value;
  return callback_metrics_;
}

Metrics LoggerConnector::progress_bar_metrics() const {
  auto metrics = eval_metrics.prog_bar_metrics();
  for (const auto& [name, value] : train_metrics.prog_bar_metrics()) metrics[name] = value;
  return metrics;
}

void LoggerConnector::send(const Metrics& metrics, const Progress& progress, std::optional<int64_t> step) {
  if (metrics.empty() || !strategy_.is_global_zero()) return;
  Metrics with_epoch = metrics;
  with_epoch["epoch"] = static_cast<double>(progress.current_epoch);
  for (auto& logger : loggers_)
    logger->log_metrics(with_epoch, step.value_or(held_step.value_or(progress.stepped_batches)));
  for (const auto& [name, value] : with_epoch) logged_metrics_[name] = value;
}

GatherFn LoggerConnector::gather() const {
  auto* group = strategy_.collectives();
  if (group == nullptr || group->world_size() == 1) return nullptr;
  return metrics::gather_values(*group);
}

void LoggerConnector::sync_step_values(MetricStore& store, const GatherFn& gather, Profiler* profiler) {
  if (!gather || !store.has_unsynced_step_values()) return;
  ProfileScope scope(profiler, "[LoggerConnector].sync_step_values");
  store.sync_step_values(gather);
}

}  // namespace arc::detail
