// LearningRateMonitor: logs every optimizer's learning rates to the loggers.
#pragma once

#include <arc/core/callback.h>
#include <arc/core/train_module.h>

#include <optional>
#include <string>

namespace arc {

/// Logs Lightning's "lr-<Optimizer class>[-<k>][/pg<j>]" ("lr-SGD", a second SGD "lr-SGD-1", groups
/// from "/pg1") at the start of every epoch, or ("step") of every batch
/// whose step metrics are logged (every log_every_n_steps batches).
class LearningRateMonitor : public Callback {
 public:
  /// `logging_interval`: "step", "epoch", or unset (Lightning's None, a config's default): an
  /// optimizer with a scheduler at its scheduler's interval, one without at both. `log_momentum`:
  /// also "<name>-momentum" (SGD's and RMSprop's momentum, Adam's and AdamW's beta1, 0 for an
  /// optimizer without one); `log_weight_decay`: also "<name>-weight_decay".
  explicit LearningRateMonitor(std::optional<std::string> logging_interval = "epoch", bool log_momentum = false,
                               bool log_weight_decay = false);
  std::string state_key() const override { return "LearningRateMonitor"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, Batch& batch, int64_t batch_idx) override;

  /// The names and rates it would log now.
  static std::map<std::string, double> rates(const Trainer& trainer);

 private:
  /// Logs the optimizers whose scheduler steps at `interval` (all of them when logging_interval is it).
  void log(Trainer& trainer, Interval interval) const;

  /// Unset: each optimizer at its scheduler's interval.
  std::optional<Interval> interval_;
  bool log_momentum_;
  bool log_weight_decay_;
};

}  // namespace arc
