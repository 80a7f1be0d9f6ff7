// Tuner: Lightning's learning-rate range test (lr_find). It trains a copy of the run for a few steps
// while the learning rate grows from min_lr to max_lr, records the smoothed loss, suggests the rate
// where the loss falls fastest, and puts the module's weights back.
#pragma once

#include <arc/base/arg.h>
#include <arc/data/data_module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class Trainer;
class TrainModule;

struct LRFinderOptions {
  ARC_ARG(double, min_lr) = 1e-8;
  ARC_ARG(double, max_lr) = 1.0;
  /// Optimizer steps of the sweep.
  ARC_ARG(int64_t, num_training) = 100;
  /// "exponential" (the rate grows by a constant factor each step) or "linear".
  ARC_ARG(std::string, mode) = "exponential";
  /// Stops once the smoothed loss exceeds this many times its best (<= 0: never).
  ARC_ARG(double, early_stop_threshold) = 4.0;
};

/// What a sweep found: each step's learning rate and smoothed loss.
class LRFinder {
 public:
  LRFinder(std::vector<double> lrs, std::vector<double> losses);
  const std::vector<double>& lrs() const { return lrs_; }
  const std::vector<double>& losses() const { return losses_; }
  /// The rate at the steepest fall of the loss, leaving out the first `skip_begin` and last
  /// `skip_end` steps (Lightning's defaults); none when fewer than two finite losses remain.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  /// "lr,loss" rows, for plotting elsewhere.
  void write_csv(const std::string& path) const;
  /// The curve on a logarithmic rate axis, with the suggestion marked, as an SVG image.
  void write_svg(const std::string& path) const;

 private:
  std::vector<double> lrs_;
  std::vector<double> losses_;
};

/// Tunes for a Trainer of one process (Lightning's Tuner refuses distributed strategies too).
class Tuner {
 public:
  explicit Tuner(Trainer& trainer) : trainer_(trainer) {}
  /// The range test on `train` (or the module's or data module's training data). The module's
  /// weights are as before afterwards; set the suggested rate yourself (C++ has no attribute to
  /// write it into).
  LRFinder lr_find(TrainModule& module, DataSource train, const LRFinderOptions& options = {});

 private:
  Trainer& trainer_;
};

}  // namespace arc
