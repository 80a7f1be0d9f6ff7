// GradientAccumulationScheduler: changes accumulate_grad_batches by epoch ({0: 8, 4: 4, 8: 1}).
#pragma once

#include <arc/core/callback.h>

#include <map>

namespace arc {

/// From each listed epoch on, accumulate that many batches per optimizer step.
class GradientAccumulationScheduler : public Callback {
 public:
  /// `scheduling`: epoch (0 or more) to batches per step (1 or more), at least one entry; the epochs
  /// before the first listed one accumulate 1.
  explicit GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling);
  std::string state_key() const override { return "GradientAccumulationScheduler"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  /// The factor in force at `epoch`.
  int64_t factor(int64_t epoch) const;

 private:
  std::map<int64_t, int64_t> scheduling_;
};

}  // namespace arc
