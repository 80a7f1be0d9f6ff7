// MetricStore: values logged by a module's steps, kept per step and aggregated per epoch
// (mean weighted by batch size, sum, max, min), named as Lightning names them.
#pragma once

#include <arc/base/arg.h>
#include <arc/base/reduce.h>

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <functional>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace arc {

namespace metrics {
class Metric;
}

/// Options of TrainModule::log, as Lightning's self.log: `log("val_loss", loss,
/// LogOptions().prog_bar(true).sync_dist(true))`. Unset on_step/on_epoch take Lightning's defaults:
/// per step in training, per epoch in validation and test.
class LogOptions {
  /// Logged at each step (as "<name>_step" when on_epoch too).
  ARC_ARG(std::optional<bool>, on_step);
  /// Aggregated over the epoch (as "<name>_epoch" when on_step too).
  ARC_ARG(std::optional<bool>, on_epoch);
  /// Shown by the progress bar.
  ARC_ARG(bool, prog_bar) = false;
  /// Sent to the loggers.
  ARC_ARG(bool, logger) = true;
  /// How the epoch aggregates the steps' values (and sync_dist the ranks'): mean, sum, max or min.
  ARC_ARG(Reduce, reduce) = Reduce::mean;
  /// Reduced across ranks when several processes train.
  ARC_ARG(bool, sync_dist) = false;
  /// Weight for the epoch mean; defaults to the batch's size.
  ARC_ARG(std::optional<int64_t>, batch_size);
  /// Logged from rank 0 only (calls on other ranks are ignored), as Lightning's rank_zero_only:
  /// never synchronized, and callbacks on other ranks cannot monitor it.
  ARC_ARG(bool, rank_zero_only) = false;
  /// With several loaders in validation, test or predict, the name gets "/dataloader_idx_N" (after
  /// "_step" or "_epoch"), as Lightning's add_dataloader_idx; turn off to merge the loaders' values.
  ARC_ARG(bool, add_dataloader_idx) = true;
};

/// Metric values by name.
using Metrics = std::map<std::string, double>;

/// The metrics' names, for an error about `missing`, which is not among them: "loss, val_loss" (or
/// "none"), and "; did you mean 'val_loss'?" when one is a near spelling of it.
std::string metric_names(const Metrics& metrics, const std::string& missing);

/// A metric's value in checkpoint metadata: JSON has no NaN or infinity, so those are the strings
/// "nan", "inf" and "-inf" (a loss that diverged must not make its checkpoint unreadable).
///@{
nlohmann::json metric_to_json(double value);
double metric_from_json(const nlohmann::json& value);
nlohmann::json metrics_to_json(const Metrics& metrics);
Metrics metrics_from_json(const nlohmann::json& json);
///@}

/// Gathers one vector of numbers from every rank, in rank order (one collective).
using GatherFn = std::function<std::vector<std::vector<double>>(const std::vector<double>&)>;

/// Logged values of one stage (training, or evaluation).
class MetricStore {
 public:
  /// Records `value` logged at the current step. `training` selects the on_step/on_epoch
  /// defaults; `batch_size` weighs the epoch mean when options.batch_size() is unset; a
  /// `dataloader_idx` keeps the value apart from other loaders' under "<name>/dataloader_idx_N".
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options, bool training,
           int64_t batch_size, std::optional<int64_t> dataloader_idx = std::nullopt);
  /// Records `metric` logged at the current step, as Lightning logs a torchmetrics object: on_step
  /// its value over the step's update (Metric::batch_value), on_epoch its value over every rank's
  /// updates, computed when the epoch ends, after which it is reset. `metric` must outlive the
  /// stage; it combines its own state, so sync_dist and reduce do not apply to it.
  void log(const std::string& name, metrics::Metric& metric, const LogOptions& options, bool training,
           std::optional<int64_t> dataloader_idx = std::nullopt);

  /// Reduces across ranks the on_step values logged with sync_dist since the last call, in one
  /// collective (none when there are none), as Lightning syncs each at its log call: every rank must
  /// call, having logged the same names. Without `gather` (one process) nothing changes.
  void sync_step_values(const GatherFn& gather);
  /// Whether an on_step value was logged with sync_dist since the last sync_step_values.
  bool has_unsynced_step_values() const;
  /// Values logged at the last step for loggers ("loss", or "loss_step" when also per epoch).
  Metrics step_logger_metrics() const;
  /// Values for the progress bar (latest step value, else the epoch value).
  Metrics prog_bar_metrics() const;
  /// Step and epoch values under every name callbacks may monitor.
  Metrics callback_metrics() const;
  /// Closes the epoch: aggregates epoch values and returns them for loggers. With `gather`,
  /// sync_dist values are reduced across ranks with one collective, and logged metrics computed over
  /// every rank's states (every rank must call).
  Metrics end_epoch(const GatherFn& gather = nullptr);
  /// The accumulated values, for checkpoints: a run resumed mid-epoch ends the epoch with the
  /// same aggregates as one never interrupted.
  ///@{
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);
  ///@}
  /// Forgets everything (a new stage starts).
  void clear() { entries_.clear(); }
  /// Whether nothing was logged since the last clear().
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    bool on_step = false;
    bool on_epoch = false;
    bool prog_bar = false;
    bool logger = true;
    bool sync_dist = false;
    Reduce reduce = Reduce::mean;
    torch::Tensor step_value;
    /// step_value was logged with sync_dist and is not synced yet (a synced value is not synced again:
    /// a sum would grow by the world size each time).
    bool step_unsynced = false;
    double weighted_sum = 0;
    double weight = 0;
    double extreme = 0;
    int64_t count = 0;
    std::optional<double> epoch_value;
    /// "/dataloader_idx_N", or "": the end of the entry's key, which the metric names end with.
    std::string suffix;
    /// A logged metric object (logged this epoch when count is 1), computed at the epoch's end.
    metrics::Metric* metric = nullptr;
  };

  static std::string step_name(const std::string& name, const Entry& entry);
  static std::string epoch_name(const std::string& name, const Entry& entry);
  static double aggregate(const Entry& entry);
  void sync_epoch(const GatherFn& gather);
  std::vector<std::string> synced_names(bool epoch) const;
  Entry& entry_for(const std::string& name, const LogOptions& options, bool training,
                   std::optional<int64_t> dataloader_idx);
  void compute_metrics(const GatherFn& gather, Metrics& out);

  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace arc
