// LearningRateFinder: Lightning's callback that runs the learning-rate range test at the start of
// fit and trains at the rate it suggests.
#pragma once

#include <arc/core/callback.h>
#include <arc/core/tuner.h>

#include <optional>
#include <string>

namespace arc {

/// At fit start, before the first step, the range test of arc::Tuner's lr_find on the fit's own
/// training data and strategy (under DDP on every rank, the gradients averaged, as Lightning's),
/// leaving the weights as they were; then, with `update_attr`, training starts at the suggested
/// rate: it is written where configure_optimizers() reads it — the hyper-parameter `attr_name` (by
/// default "lr" or "learning_rate", Lightning's names) and, under `arc fit`, the config's optimizer —
/// and the optimizers are built again, their schedulers with them (Lightning 2.2.5's callback found the
/// rate and trained at the old one: its issue 21030). A resumed fit keeps the checkpoint's rates, so
/// that it continues exactly; fast_dev_run skips the test, as Lightning's.
/// Subclasses that test elsewhere override on_fit_start; lr_find runs only before the first step.
class LearningRateFinder : public Callback {
 public:
  /// Tests with `options`; `update_attr` and `attr_name` as above.
  explicit LearningRateFinder(LRFinderOptions options = {}, bool update_attr = true, std::string attr_name = "");
  std::string state_key() const override { return "LearningRateFinder"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;

  /// The range test now, and with update_attr the rate set.
  void lr_find(Trainer& trainer, TrainModule& module);
  /// The last test's curve and suggestion(); none before a test ran.
  const std::optional<LRFinder>& optimal_lr() const { return optimal_lr_; }

 private:
  LRFinderOptions options_;
  bool update_attr_;
  std::string attr_name_;
  std::optional<LRFinder> optimal_lr_;
};

}  // namespace arc
