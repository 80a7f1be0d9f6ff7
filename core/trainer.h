// Trainer: runs a TrainModule's fit, validate, test and predict, with Lightning's options,
// hooks, callbacks and loggers.
#pragma once

#include <arc/base/error.h>
#include <arc/core/callback.h>
#include <arc/core/metric_store.h>
#include <arc/core/train_module.h>
#include <arc/core/trainer_options.h>
#include <arc/data/data_module.h>
#include <arc/fabric/precision.h>
#include <arc/loggers/logger.h>
#include <arc/profilers/profiler.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class AcceleratorBackend;
class DataLoader;
class Strategy;

namespace detail {
struct RunState;
}

/// Counters of a run, as Lightning's trainer exposes them.
struct Progress {
  /// The epoch that runs (the epochs finished, between epochs).
  int64_t current_epoch = 0;
  /// Optimizer steps taken.
  int64_t global_step = 0;
  /// Training batches run in the current epoch.
  int64_t epoch_batches = 0;
  /// Training batches run since fit started.
  int64_t total_batches = 0;
  /// Training batches that ended an optimizer step's window (every batch under manual optimization,
  /// however many optimizers it steps): Lightning's `_batches_that_stepped`, the loggers' step.
  int64_t stepped_batches = 0;
  /// Validations run inside fit, each counted before its on_validation_end.
  int64_t validation_runs = 0;
};

/// Runs TrainModules. One Trainer can run several stages one after another.
class Trainer {
 public:
  /// `profiler`: one of your own, in place of options.profiler (which must then be "").
  explicit Trainer(TrainerOptions options = TrainerOptions(), std::vector<std::shared_ptr<Callback>> callbacks = {},
                   std::vector<std::shared_ptr<Logger>> loggers = {}, std::shared_ptr<Profiler> profiler = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains with data from `data`; validates as the options say. `ckpt_path` (a file, "last",
  /// "best" or "hpc") resumes exactly where that checkpoint stopped.
  void fit(TrainModule& module, DataModule& data, const std::string& ckpt_path = "");
  /// Trains on `train` (or the module's own train_dataloader), validating on `val` (one source or
  /// several: `{val_a, val_b}`) if given.
  void fit(TrainModule& module, DataSource train = {}, DataSources val = {}, const std::string& ckpt_path = "");
  /// One pass over the validation data (weights from `ckpt_path` if given); the epoch metrics (with
  /// several loaders, each one's names end in "/dataloader_idx_N"). With `verbose`, rank 0 prints
  /// them as Lightning's table on standard output.
  ///@{
  Metrics validate(TrainModule& module, DataModule& data, const std::string& ckpt_path = "", bool verbose = true);
  Metrics validate(TrainModule& module, DataSources val = {}, const std::string& ckpt_path = "", bool verbose = true);
  ///@}
  /// One pass over the test data (weights from `ckpt_path` if given); the epoch metrics, printed as
  /// validate prints them.
  ///@{
  Metrics test(TrainModule& module, DataModule& data, const std::string& ckpt_path = "", bool verbose = true);
  Metrics test(TrainModule& module, DataSources test_data = {}, const std::string& ckpt_path = "", bool verbose = true);
  ///@}
  /// predict_step's outputs, batch by batch (loader after loader when there are several); none
  /// without `return_predictions`, where a callback (PredictionWriter) takes each one and nothing
  /// keeps them all (Lightning's return_predictions=False).
  ///@{
  std::vector<torch::Tensor> predict(TrainModule& module, DataModule& data, const std::string& ckpt_path = "",
                                     bool return_predictions = true);
  std::vector<torch::Tensor> predict(TrainModule& module, DataSources predict_data = {},
                                     const std::string& ckpt_path = "", bool return_predictions = true);
  ///@}
  /// Sends `metrics` to the loggers at the current global step (rank 0 only).
  void log_to_loggers(const Metrics& metrics);
  /// Batches per optimizer step from now on (GradientAccumulationScheduler sets it per epoch).
  void set_accumulate_grad_batches(int64_t batches);
  /// The limits of fit from now on (Lightning's `trainer.fit_loop.max_epochs = n`): a fit that ended at
  /// max_epochs trains on in the next fit once it is raised (-1: no limit). A fit keeps the epoch and
  /// global step of this Trainer's earlier one, as Lightning's does.
  ///@{
  void set_max_epochs(int64_t epochs);
  void set_max_steps(int64_t steps);
  ///@}
  /// Batches per optimizer step now: the accumulate_grad_batches option, or what
  /// set_accumulate_grad_batches set since.
  int64_t accumulate_grad_batches() const;
  /// Writes a checkpoint of the running (or last) module: rank 0 writes; every rank calls it (a
  /// sharded strategy gathers the optimizer state and parameters for it).
  /// `in_background` (unset: the async_checkpointing option) during fit: rank 0 copies the state
  /// and returns, a background thread writes the file; fit ends only once it is written. Outside fit,
  /// saves are synchronous.
  void save_checkpoint(const std::string& path, bool weights_only = false,
                       std::optional<bool> in_background = std::nullopt);
  /// Runs `action` once every checkpoint this process asked to save is written: at once when none
  /// is being written in the background (an error it throws comes back here), else on the writing
  /// thread after them (an error it throws fails fit as a failed write); not at all when one of
  /// those writes failed. For file work that must wait for a file: a link to it, the removal of the
  /// file it replaces. The action must not save checkpoints or use collectives.
  void after_checkpoint_writes(std::function<void()> action);

  /// The options, with fast_dev_run's and overfit_batches' limits applied and what set_max_epochs and
  /// set_max_steps changed.
  const TrainerOptions& options() const { return options_; }
  /// The run's counters.
  const Progress& progress() const;
  /// progress().current_epoch.
  int64_t current_epoch() const { return progress().current_epoch; }
  /// progress().global_step: the optimizer steps taken.
  int64_t global_step() const { return progress().global_step; }
  /// Ends fit after the current step (respecting min_epochs/min_steps), as `trainer.should_stop`: a
  /// stop mid-epoch validates first where the epoch validates, unless a validation came after the ask.
  void request_stop(const std::string& reason);
  /// Whether request_stop was called since the current stage started.
  bool should_stop() const;
  /// The reason given to request_stop ("" when none).
  const std::string& stop_reason() const;
  /// Whether fit's sanity check runs.
  bool sanity_checking() const;
  /// The stage that runs (or ran last).
  Stage stage() const;
  /// Training batches per epoch after limits; the batches of the current (or last) validation run,
  /// or of test or predict under those stages. kUnknownLength for a stream, until the ranks know
  /// where its epoch ends (a few batches before).
  ///@{
  int64_t num_training_batches() const;
  int64_t num_val_batches() const;
  ///@}
  /// During fit: the training loader (Lightning's trainer.train_dataloader); null otherwise.
  DataLoader* train_dataloader() const;
  /// During validation, test or predict: the index of the loader whose batch runs, among the
  /// stage's loaders (0 with one), for hooks and callbacks; the steps get it as an argument.
  int64_t dataloader_idx() const;
  /// During predict: the dataset indices of the current batch's samples on this rank, or their
  /// positions in a stream (what BasePredictionWriter passes on, so that each rank's predictions
  /// can be put back in order).
  const std::vector<int64_t>& batch_indices() const;
  /// Optimizer steps this fit will take, for schedulers such as OneCycleLR (Lightning's
  /// estimated_stepping_batches): ceil(training batches / accumulate_grad_batches) · max_epochs,
  /// at most max_steps (max_steps alone for a stream). Known once fit has started (in
  /// configure_optimizers and later).
  int64_t estimated_stepping_batches() const;
  /// Every metric callbacks may monitor: step values, epoch values.
  const Metrics& callback_metrics() const;
  /// callback_metrics() as rank 0 has them, on every rank (one broadcast; every rank must call):
  /// what a decision that every rank must take alike reads, such as ModelCheckpoint's, since values
  /// logged without sync_dist differ by rank. Rank 0's are the ones its loggers show.
  Metrics agreed_metrics();
  /// What was last sent to the loggers.
  const Metrics& logged_metrics() const;
  /// During a training batch (its hooks included): whether its step metrics go to the loggers,
  /// as they do every log_every_n_steps batches. Callbacks that log per step follow it.
  bool logging_batch() const;
  /// The values logged with prog_bar, as the progress bar shows them.
  Metrics progress_bar_metrics() const;
  /// Seconds since the current stage started.
  double elapsed_seconds() const;
  /// During fit, elapsed_seconds() as the ranks agreed at the last batch boundary (the latest of
  /// their clocks at their vote there): the same on every rank at the same batch, for decisions by
  /// the clock that every rank must take together, such as ModelCheckpoint's train_time_interval.
  /// Under DDP a batch behind the clock (the vote overlaps a batch), 0 before the first vote; with
  /// one process, elapsed_seconds().
  double agreed_elapsed_seconds() const;

  /// The first callback of class `T` (or of a class derived from it), or null: Lightning's
  /// `trainer.checkpoint_callback` is `callback<ModelCheckpoint>()` (the default one too), its
  /// `early_stopping_callback` `callback<EarlyStopping>()`.
  template <typename T>
  std::shared_ptr<T> callback() const {
    for (const auto& each : callbacks_)
      if (auto found = std::dynamic_pointer_cast<T>(each)) return found;
    return nullptr;
  }
  /// The callbacks, in the order their hooks run: the given ones with the Trainer's defaults and, once
  /// a stage started, the module's, the checkpointing ones last.
  ///@{
  std::vector<std::shared_ptr<Callback>>& callbacks() { return callbacks_; }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  ///@}
  /// The loggers (the default CSV and TensorBoard loggers when none was given and `logger` is on).
  ///@{
  std::vector<std::shared_ptr<Logger>>& loggers() { return loggers_; }
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  ///@}
  /// What configure_optimizers returned in the running (or last) fit; empty before any fit.
  const std::vector<OptimizerConfig>& optimizer_configs() const;
  /// The profiler the run times its actions with; null when none.
  Profiler* profiler() const { return profiler_.get(); }
  /// How the run is spread over processes and devices ("ddp", "single_device", ...).
  Strategy& strategy() const;
  /// The hardware backend the options chose ("cpu", "cuda", ...).
  AcceleratorBackend& accelerator() const;
  /// This process's device, where the module and its batches are.
  torch::Device device() const;
  /// The number of processes that train together (1 without DDP).
  int64_t world_size() const;
  /// This process's rank among them, from 0.
  int64_t global_rank() const;
  /// Whether this is rank 0, which logs and writes checkpoints.
  bool is_global_zero() const;
  /// default_root_dir, or the first logger's folder when there is one.
  std::string log_dir() const;

  /// Called by TrainModule::log.
  void log_from_module(const std::string& name, const torch::Tensor& value, const LogOptions& options);
  /// Called by TrainModule::log_dict: where a hook logs them with sync_dist, the values are synced
  /// in one collective.
  void log_from_module(const std::map<std::string, torch::Tensor>& values, const LogOptions& options);
  /// Called by TrainModule::log of a metric object.
  void log_from_module(const std::string& name, metrics::Metric& metric, const LogOptions& options);
  /// Called by TrainModule::manual_backward and the automatic loop.
  void backward(TrainModule& module, const torch::Tensor& loss);
  /// The precision plugin ("32-true", "bf16-mixed", ...).
  Precision& precision() const { return *precision_; }
  /// TrainerOptimizer::step, in Lightning's order: gradients unscaled (under "16-mixed"),
  /// on_before_optimizer_step (the callbacks', then the module's), configure_gradient_clipping
  /// (automatic optimization), the optimizer stepped, the loss scale updated, the global step advanced.
  void optimizer_step(torch::optim::Optimizer& optimizer);
  /// on_before_zero_grad, then every gradient of `optimizer` set to none: by the module's
  /// optimizer_zero_grad hook in the automatic loop (`batch_idx` given), by its default for
  /// TrainerOptimizer::zero_grad (manual optimization, where Lightning calls no hook either).
  void zero_grad(torch::optim::Optimizer& optimizer, std::optional<int64_t> batch_idx = std::nullopt);
  /// A loader's batch on the device, through the module's batch-transfer hooks and the precision's
  /// input type; `dataloader_idx` tells the stage's loaders apart.
  Batch transfer_batch(Batch batch, int64_t dataloader_idx);

  /// From a callback's on_fit_start, before fit's first step: runs a short fit of `module` on
  /// `train` with `options` and `callback` alone in this fit's place (no loggers or profiler), its
  /// progress and metrics its own, then gives the fit back its options, callbacks, loggers and state,
  /// as Lightning's tuners do. What LearningRateFinder's and BatchSizeFinder's searches run; the
  /// caller restores the module's weights.
  void run_trial_fit(TrainModule& module, TrainerOptions options, std::shared_ptr<Callback> callback,
                     const DataSource& train);
  /// From a callback's on_fit_start: fit's optimizers rebuilt by the module's configure_optimizers
  /// (after a hyper-parameter they read changed), as Lightning's strategy.setup_optimizers.
  void setup_optimizers(TrainModule& module);
  /// From a callback's on_fit_start: fit's training loader rebuilt with `batch_size` samples per
  /// batch (BatchSizeFinder's result).
  void set_train_batch_size(int64_t batch_size);

  /// Runs `hook` on every callback.
  template <typename Hook>
  void call_callbacks(Hook&& hook) {
    for (auto& callback : callbacks_) hook(*callback);
  }

 private:
  void run_stage(Stage stage, TrainModule& module, DataModule* data, const std::function<void()>& body);
  /// Saves through the callbacks, says where, and ends this process with status 130.
  [[noreturn]] void end_interrupted(TrainModule& module, const Interrupted& interrupted);
  void run_fit(TrainModule& module, DataModule* data, DataSource train, DataSources val, const std::string& ckpt_path);
  Metrics run_evaluation(Stage stage, TrainModule& module, DataModule* data, DataSources given,
                         const std::string& ckpt_path, bool verbose);
  std::vector<torch::Tensor> run_predict(TrainModule& module, DataModule* data, DataSources given,
                                         const std::string& ckpt_path, bool return_predictions);
  /// What validate, test and predict do first: load the checkpoint's weights (when given) and send
  /// the hyper-parameters to the loggers, as Lightning's every stage does after its restore.
  void start_evaluation(TrainModule& module, const std::string& ckpt_path);
  void setup_environment();
  /// `changed` as the options from now on, checked as the constructor checks them; `call` names the
  /// setter in errors.
  void replace_options(const TrainerOptions& changed, const std::string& call);
  void attach(TrainModule& module);
  void detach();
  /// Records a value that the module logs; false where it is not recorded (rank_zero_only on
  /// another rank, barebones).
  bool record_logged(const std::string& name, const torch::Tensor& value, const LogOptions& options);
  /// Syncs the values just recorded with sync_dist where a loop's hook logged them, as Lightning's
  /// (a step's values wait for the step's end).
  void sync_logged(const LogOptions& options);

  TrainerOptions options_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  std::shared_ptr<Profiler> profiler_;
  std::shared_ptr<AcceleratorBackend> accelerator_;
  std::shared_ptr<Strategy> strategy_;
  std::unique_ptr<Precision> precision_;
  int64_t threads_per_process_ = 1;
  /// Progress, flags, optimizers and metrics, which the loops and connectors change too.
  std::unique_ptr<detail::RunState> state_;
  TrainModule* module_ = nullptr;
  TrainModule* last_module_ = nullptr;
};

}  // namespace arc
