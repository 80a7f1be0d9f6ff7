// Tuner: Lightning's learning-rate range test (lr_find), which trains a copy of the run for a few
// steps while the learning rate grows from min_lr to max_lr, records the smoothed loss and suggests
// the rate where the loss falls fastest, and its batch-size search (scale_batch_size). Both put the
// module's weights back.
#pragma once

#include <arc/base/arg.h>
#include <arc/core/trainer_options.h>
#include <arc/data/data_module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class Callback;
class Trainer;
class TrainModule;

/// How lr_find sweeps the learning rate, with Lightning's defaults.
struct LRFinderOptions {
  /// The rate of the first step (above 0).
  ARC_ARG(double, min_lr) = 1e-8;
  /// The rate of the last step (above min_lr).
  ARC_ARG(double, max_lr) = 1.0;
  /// Optimizer steps of the sweep.
  ARC_ARG(int64_t, num_training) = 100;
  /// "exponential" (the rate grows by a constant factor each step) or "linear".
  ARC_ARG(std::string, mode) = "exponential";
  /// Stops once the smoothed loss exceeds this many times its best (<= 0: never).
  ARC_ARG(double, early_stop_threshold) = 4.0;
};

/// Throws arc::Error naming the option that lr_find cannot run with.
void check_lr_finder_options(const LRFinderOptions& options);

/// What a sweep found: each step's learning rate and smoothed loss.
class LRFinder {
 public:
  /// The curve of `lrs` and their `losses`, one of each per step.
  LRFinder(std::vector<double> lrs, std::vector<double> losses);
  /// Each step's learning rate.
  const std::vector<double>& lrs() const { return lrs_; }
  /// Each step's smoothed loss.
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

/// How scale_batch_size searches, with Lightning's defaults.
struct BatchSizeOptions {
  /// "power": doubles until a trial runs out of memory; "binsearch": then bisects between the last
  /// size that fit and the first that did not. A first size that does not fit is halved until one
  /// does (Lightning's).
  ARC_ARG(std::string, mode) = "power";
  /// Optimizer steps each trial trains.
  ARC_ARG(int64_t, steps_per_trial) = 3;
  /// The size of the first trial.
  ARC_ARG(int64_t, init_val) = 2;
  /// Trials at most, those that ran out of memory included.
  ARC_ARG(int64_t, max_trials) = 25;
  /// binsearch only: the size found is lowered by this fraction, a safety buffer (Lightning's).
  ARC_ARG(double, margin) = 0.05;
  /// No trial goes above this size (Lightning's max_val): a CPU rarely runs out of memory first.
  ARC_ARG(int64_t, max_val) = 8192;
};

/// Throws arc::Error naming the option that scale_batch_size cannot run with.
void check_batch_size_options(const BatchSizeOptions& options);

/// Tunes for a Trainer of one process (Lightning's Tuner refuses distributed strategies too).
class Tuner {
 public:
  /// A tuner for `trainer`, whose options its trials take (with their own limits, and no logger).
  explicit Tuner(Trainer& trainer) : trainer_(trainer) {}
  /// The range test on `train` (or the module's or data module's training data). The module's
  /// weights are as before afterwards; set the suggested rate yourself (C++ has no attribute to
  /// write it into).
  LRFinder lr_find(TrainModule& module, DataSource train, const LRFinderOptions& options = {});
  /// The range test on the data module's training data (prepared and set up for fit).
  LRFinder lr_find(TrainModule& module, DataModule& data, const LRFinderOptions& options = {});
  /// The largest batch size of `train` whose training steps fit in memory: trials of a few steps
  /// with growing sizes, where running out of memory (std::bad_alloc, or the error of LibTorch's CPU
  /// or GPU allocator) ends a trial; never above the dataset's size or max_val. The weights are put back.
  int64_t scale_batch_size(TrainModule& module, DataSource train, const BatchSizeOptions& options = {});
  /// The search on the data module's training data; set the size it finds as the data module's.
  int64_t scale_batch_size(TrainModule& module, DataModule& data, const BatchSizeOptions& options = {});

  /// The range test inside this Trainer's running fit, before its first step (what
  /// LearningRateFinder runs at fit start): on the fit's training data and strategy — under DDP
  /// every rank trains its share with the gradients averaged, as Lightning's — with no other
  /// callback, no logger and no validation; afterwards the weights, the gradients, the CPU random
  /// state and the loss scale are as before. Every rank returns rank 0's curve.
  /// `rate_key`, unless nullopt: training then starts at the suggested rate, written where
  /// configure_optimizers() reads it — the config's optimizer (`arc fit`) and the module's
  /// hyper-parameter `rate_key` ("": "lr" or "learning_rate", whichever the module has) — and the
  /// optimizers built again. A module that has neither is an error before the test; one whose
  /// optimizers do not change with the key, an error after it.
  LRFinder lr_find_in_fit(TrainModule& module, const LRFinderOptions& options, std::optional<std::string> rate_key);

  /// scale_batch_size inside this Trainer's running fit, before its first step (what BatchSizeFinder
  /// runs at fit start): each trial trains a few steps of the fit's own training data and loop, with
  /// no other callback, no logger and no validation, and leaves no trace (as lr_find_in_fit). Then
  /// the fit trains with the size found: its training data is loaded again with it (and whenever it
  /// is loaded anew), the module's hyper-parameter `batch_arg_name` holds it when the module has one,
  /// and the optimizers are built again, so that what they count from estimated_stepping_batches
  /// counts the new batches. Checkpoints keep the size, and a fit resumed from one trains with it.
  /// One process only, as Lightning's.
  int64_t scale_batch_size_in_fit(TrainModule& module, const BatchSizeOptions& options,
                                  const std::string& batch_arg_name);

 private:
  /// Options for a tuning run of `steps` optimizer steps, without validation, checkpoints, loggers
  /// or progress, in a folder of its own.
  TrainerOptions trial_options(int64_t steps) const;
  /// A Trainer of one process, which lr_find and scale_batch_size need, or an error saying so.
  void require_one_process() const;
  /// An error naming `what` unless the Trainer's fit is before its first step.
  void require_fit_start(const char* what) const;
  /// One tuning run in this Trainer's place while its fit waits: `options` (trial_options), only
  /// `callback` (when given), no logger, a run state of its own and a FitLoop over `train`.
  void run_in_fit(TrainModule& module, TrainerOptions options, std::shared_ptr<Callback> callback,
                  const DataSource& train);

  Trainer& trainer_;
};

}  // namespace arc
