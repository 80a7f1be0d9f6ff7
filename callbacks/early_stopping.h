// EarlyStopping: ends fit when a monitored metric stops improving, turns non-finite, crosses a
// stopping threshold or diverges past a limit; it says which.
#pragma once

#include <arc/base/arg.h>
#include <arc/callbacks/callback.h>

#include <optional>
#include <string>

namespace arc {

/// EarlyStopping's settings (Lightning's names and defaults).
class EarlyStoppingOptions {
 public:
  explicit EarlyStoppingOptions(std::string monitor = "val_loss") : monitor_(std::move(monitor)) {}
  ARC_ARG(std::string, monitor);
  /// Smallest change that counts as an improvement.
  ARC_ARG(double, min_delta) = 0.0;
  /// Validation checks without improvement before stopping.
  ARC_ARG(int64_t, patience) = 3;
  /// "min" or "max".
  ARC_ARG(std::string, mode) = "min";
  ARC_ARG(bool, check_finite) = true;
  /// Stop as soon as the metric is this good.
  ARC_ARG(std::optional<double>, stopping_threshold);
  /// Stop as soon as the metric is this bad.
  ARC_ARG(std::optional<double>, divergence_threshold);
};

/// Checks the monitored metric after every validation run of fit (every rank decides alike,
/// since monitored values are synced).
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = EarlyStoppingOptions());

  std::string state_key() const override { return "EarlyStopping{monitor=" + options_.monitor() + "}"; }
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  int64_t wait_count() const { return wait_; }
  std::optional<double> best_score() const { return best_; }
  /// Why it stopped ("" while it has not).
  const std::string& reason() const { return reason_; }

 private:
  std::string check(double value);

  EarlyStoppingOptions options_;
  std::optional<double> best_;
  int64_t wait_ = 0;
  std::string reason_;
};

}  // namespace arc
