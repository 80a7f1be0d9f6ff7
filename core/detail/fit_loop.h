// FitLoop: epochs of training batches, the optimization step (accumulation, clipping,
// schedulers), validation at the configured interval, and the stopping rules.
#pragma once

#include <arc/core/detail/evaluation_loop.h>
#include <arc/core/detail/signal_connector.h>
#include <arc/core/detail/straggler_monitor.h>
#include <arc/core/train_module.h>
#include <arc/data/batch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace arc {

class DataLoader;
class Trainer;

namespace detail {
struct RunState;
}

/// Where fit's loaders come from: called once at the start, and again every
/// reload_dataloaders_every_n_epochs epochs.
struct FitData {
  std::function<std::unique_ptr<DataLoader>()> train;
  std::function<Loaders()> val;
};

/// The module's optimizers and schedulers from its configure_optimizers(), checked (what fit trains
/// with; LearningRateFinder builds them again with the rate it found).
std::vector<OptimizerConfig> checked_optimizers(TrainModule& module);

/// Runs Trainer::fit's training.
class FitLoop {
 public:
  /// `resume_from`: a checkpoint to continue from exactly ("" starts afresh).
  FitLoop(Trainer& trainer, detail::RunState& state, TrainModule& module, FitData data, std::string resume_from);
  ~FitLoop();
  void run();
  /// Loads the training data again and counts its batches anew (BatchSizeFinder changed its batch
  /// size before the first step).
  void reload_train();

 private:
  /// max_epochs, or its default: 1000, or none (-1) where max_steps is set.
  int64_t max_epochs() const;
  bool epochs_done() const;
  /// max_steps reached, or max_time passed where the stop may come.
  bool steps_done() const;
  /// Whether min_epochs and min_steps let the fit stop.
  bool can_stop_early() const;
  bool stop_requested() const;
  bool time_up() const;
  /// Whether the fit validates before it stops after this batch.
  bool validation_at_stop() const;
  /// Says so when an epoch is shorter than log_every_n_steps (rank 0).
  void warn_of_sparse_logging() const;
  /// Lightning's line on why fit ended: a stop asked for, or (outside tuning) max_time, max_steps or
  /// max_epochs.
  void say_why_fit_ended() const;
  std::string nothing_to_train(const std::string& limit) const;
  void run_epoch();
  /// Takes the training loader from `data_.train` and counts its batches.
  void load_train();
  /// What follows from the training batches' count: estimated_stepping_batches and the batches
  /// between validations.
  void count_training();
  void load_val();
  bool has_validation() const;
  void run_batch(Batch& batch, int64_t batch_idx);
  void timed_batch(Batch& batch, int64_t batch_idx, std::chrono::steady_clock::time_point fetch_start);
  /// The module's training_step under the precision's forward context; then the values it logged
  /// with sync_dist are synced.
  torch::Tensor training_step(Batch& batch, int64_t batch_idx);
  /// Whether the batch ends an accumulation window (the automatic loop steps after it).
  bool ends_window(int64_t batch_idx) const;
  /// training_step, backward and, at an accumulation window's end (`boundary`), the step; an
  /// undefined loss skips the backward and (on every rank) that step.
  void automatic_step(Batch& batch, int64_t batch_idx, bool boundary, torch::Tensor& loss);
  /// The module's optimizer_step, then the step-interval schedulers if it stepped.
  void optimizer_step(int64_t batch_idx);
  void step_schedulers(Interval interval);
  /// The ranks' vote at a batch boundary, with where this rank's stream ends when it knows.
  void vote(bool settle);
  /// Keeps what the ranks agreed, noting whether min_epochs or min_steps held back max_time.
  void agree(const SignalConnector::Decision& decision);
  /// Applies even_batches when the ranks' batch counts differ (after an epoch's first vote).
  void even_out();
  bool validation_due(int64_t batch_idx) const;
  bool validates_this_epoch() const;
  /// Whether this rank's time-based val_check_interval ran out since the last validation.
  bool validation_wanted() const;
  void validate();
  void sanity_check();
  void log_step();
  /// Waits for the checkpoints still being written in the background; a failed one fails fit on
  /// every rank.
  void finish_background_saves();

  Trainer& trainer_;
  detail::RunState& state_;
  TrainModule& module_;
  FitData data_;
  std::unique_ptr<DataLoader> train_;
  /// limit_train_batches of the training loader's batches (kUnknownLength: all of a stream's).
  int64_t train_limit_ = 0;
  Loaders val_;
  /// The epoch whose start loaded the validation loaders.
  int64_t val_loaded_epoch_ = 0;
  /// Whether max_epochs or max_steps had been reached when the fit began (by an earlier fit, or in the
  /// checkpoint it resumed from).
  bool done_at_start_ = false;
  std::vector<int64_t> val_batches_;
  int64_t val_every_ = 0;
  std::string resume_from_;
  int64_t first_batch_ = 0;
  std::unique_ptr<SignalConnector> signals_;
  /// Under DDP: the ranks' step times, compared every log_every_n_steps steps.
  std::unique_ptr<StragglerMonitor> stragglers_;
  /// What the ranks agreed at the last batch boundary (a stop request, max_time).
  SignalConnector::Decision agreed_;
  /// Whether max_time passed before min_epochs and min_steps let the fit stop.
  bool time_held_ = false;
  std::chrono::steady_clock::time_point last_validation_;
};

}  // namespace arc
