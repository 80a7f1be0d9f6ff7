// EarlyStopping: ends fit when a monitored metric stops improving, turns non-finite, crosses a
// stopping threshold or diverges past a limit; it says which.
#pragma once

#include <arc/base/arg.h>
#include <arc/core/callback.h>

#include <optional>
#include <string>

namespace arc {

/// EarlyStopping's settings (Lightning's names and defaults).
class EarlyStoppingOptions {
 public:
  /// Options that monitor `monitor`, the others at their defaults.
  explicit EarlyStoppingOptions(std::string monitor = "val_loss") : monitor_(std::move(monitor)) {}
  /// The logged metric it watches.
  ARC_ARG(std::string, monitor);
  /// Smallest change that counts as an improvement.
  ARC_ARG(double, min_delta) = 0.0;
  /// Validation checks without improvement before stopping.
  ARC_ARG(int64_t, patience) = 3;
  /// "min" or "max".
  ARC_ARG(std::string, mode) = "min";
  /// Stop as soon as the metric is NaN or infinite.
  ARC_ARG(bool, check_finite) = true;
  /// Stop as soon as the metric is this good.
  ARC_ARG(std::optional<double>, stopping_threshold);
  /// Stop as soon as the metric is this bad.
  ARC_ARG(std::optional<double>, divergence_threshold);
  /// Say each improvement (rank 0).
  ARC_ARG(bool, verbose) = false;
  /// A monitored metric that was not logged is an error; false skips that check (with a warning
  /// when verbose).
  ARC_ARG(bool, strict) = true;
  /// Check at the end of each training epoch (after its validation; training metrics such as
  /// train_loss can be monitored without validation), or false: after each validation run. Unset,
  /// as Lightning's: at the epoch end when validation runs once an epoch at its end, or not at all.
  ARC_ARG(std::optional<bool>, check_on_train_epoch_end);
  /// Lightning's switch between rank 0's messages and every rank's. Arclight's ranks decide alike
  /// (monitored values are synced) and rank 0 says it either way; the key is read so that
  /// LightningCLI's configs run.
  ARC_ARG(bool, log_rank_zero_only) = false;
};

/// Checks the monitored metric at each training epoch's end or after every validation run of fit
/// (every rank decides alike, since monitored values are synced).
class EarlyStopping : public Callback {
 public:
  /// Stops fit as `options` say.
  explicit EarlyStopping(EarlyStoppingOptions options = EarlyStoppingOptions());

  std::string state_key() const override { return "EarlyStopping{monitor=" + options_.monitor() + "}"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// Checks in a row without improvement so far.
  int64_t wait_count() const { return wait_; }
  /// The best monitored value so far; none before the first check.
  std::optional<double> best_score() const { return best_; }
  /// Why it stopped ("" while it has not).
  const std::string& reason() const { return reason_; }

 private:
  std::string check(double value);
  void run_check(Trainer& trainer);

  EarlyStoppingOptions options_;
  std::optional<double> best_;
  int64_t wait_ = 0;
  std::string reason_;
  bool at_epoch_end_ = false;
};

}  // namespace arc
