// Timer: stops fit after a duration, checked after every training batch, and reports the time
// spent in training and validation.
#pragma once

#include <arc/core/callback.h>
#include <arc/core/train_module.h>

#include <chrono>
#include <string>

namespace arc {

/// Stops fit once `seconds` of fit have passed (infinity: never; it only measures), checked after
/// every training batch (`interval` "step") or at each training epoch's end ("epoch"), as
/// Lightning's Timer(duration, interval). The Trainer says why fit stopped, so Lightning's
/// `verbose` has no counterpart here.
class Timer : public Callback {
 public:
  /// Stops fit after `seconds`, checked at `interval`: "step" or "epoch".
  explicit Timer(double seconds, const std::string& interval = "step");
  std::string state_key() const override { return "Timer"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override { return {{"elapsed", elapsed()}}; }
  void load_state_dict(const nlohmann::json& state) override { carried_ = state.at("elapsed").get<double>(); }

  /// Seconds of fit so far (including time before a resume).
  double elapsed() const;
  /// Seconds left before it stops fit (infinity when it only measures), as Lightning's time_remaining.
  double time_remaining() const { return limit_ - elapsed(); }
  /// Seconds spent in validation passes since it was made (fit's, its sanity check's, validate's);
  /// not carried over a resume.
  double validation_seconds() const { return validation_; }

 private:
  using Clock = std::chrono::steady_clock;
  void check(Trainer& trainer) const;

  double limit_;
  Interval interval_;
  double carried_ = 0;
  double validation_ = 0;
  Clock::time_point start_ = Clock::now();
  Clock::time_point validation_start_ = Clock::now();
};

}  // namespace arc
