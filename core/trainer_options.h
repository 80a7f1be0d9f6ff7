// TrainerOptions: the Trainer's flags, named as Lightning's, readable from and writable to JSON.
#pragma once

#include <arc/base/arg.h>
#include <arc/base/devices.h>
#include <arc/fabric/fabric_options.h>
#include <arc/profilers/profiler.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class Config;

/// A number of batches given as a fraction of the available ones (0.25) or as a count (10),
/// as Lightning's limit_*_batches: a JSON float is a fraction, a JSON integer a count. For
/// val_check_interval alone also a duration ("DD:HH:MM:SS" or {"minutes": 5} in JSON).
struct BatchAmount {
  /// The fraction, the count, or the seconds.
  double value = 1.0;
  /// Whether `value` is a fraction of the available batches (all of them by default).
  bool is_fraction = true;
  /// `value` is seconds.
  bool is_time = false;

  /// The fraction `f` of the available batches.
  static BatchAmount fraction(double f) { return {f, true, false}; }
  /// `n` batches (all of them where fewer are available).
  static BatchAmount count(int64_t n) { return {static_cast<double>(n), false, false}; }
  /// A duration in seconds (val_check_interval only).
  static BatchAmount duration(double seconds) { return {seconds, false, true}; }
  /// How many of `available` batches this amount selects.
  int64_t of(int64_t available) const;
  /// Whether the amount is 0 (no batch, as limit_val_batches=0 asks).
  bool is_zero() const { return value == 0.0; }
};

/// Lightning's `deterministic`: false, true (deterministic algorithms only: an operation without
/// one fails), or "warn" (deterministic algorithms, and a warning where an operation has none).
struct Determinism {
  /// Whether deterministic algorithms are asked for.
  bool on = false;
  /// Whether an operation without one warns instead of failing ("warn").
  bool warn_only = false;
  /// Lightning's deterministic=True or False.
  Determinism(bool deterministic = false) : on(deterministic) {}  // NOLINT: deterministic(true) reads as Lightning's
  /// "warn"; any other text is an error naming it.
  Determinism(const char* text);  // NOLINT: deterministic("warn")
  /// Whether deterministic algorithms are asked for.
  explicit operator bool() const { return on; }
};

/// One option as `arc fit --help` lists it.
struct OptionHelp {
  /// The option's key in a config, e.g. "max_epochs".
  std::string key;
  /// Its default value.
  nlohmann::json default_value;
  /// One line on what it does.
  std::string help;
};

/// Every Trainer option. Defaults are Lightning's.
class TrainerOptions {
 public:
  /// -1 runs without an epoch limit; unset means 1000 unless max_steps is set.
  ARC_ARG(std::optional<int64_t>, max_epochs);
  /// Epochs before a stop request (EarlyStopping, a Timer) or max_time may end fit.
  ARC_ARG(std::optional<int64_t>, min_epochs);
  /// Optimizer steps to train (-1: no limit).
  ARC_ARG(int64_t, max_steps) = -1;
  /// Optimizer steps before a stop request or max_time may end fit.
  ARC_ARG(std::optional<int64_t>, min_steps);
  /// Seconds of training after which fit stops at the next step.
  ARC_ARG(std::optional<double>, max_time);
  /// Training batches per epoch: a fraction (0.25) or a count (10); all by default.
  ARC_ARG(BatchAmount, limit_train_batches);
  /// Validation batches per validation run, of each loader (0 skips validation).
  ARC_ARG(BatchAmount, limit_val_batches);
  /// Test batches, of each loader.
  ARC_ARG(BatchAmount, limit_test_batches);
  /// Predict batches, of each loader.
  ARC_ARG(BatchAmount, limit_predict_batches);
  /// Train and validate on these first batches only, unshuffled (0: off).
  ARC_ARG(BatchAmount, overfit_batches) = BatchAmount::fraction(0.0);
  /// Validate every fraction of an epoch, every count of batches, or every duration (checked at
  /// batch boundaries, on every rank at the same batch).
  ARC_ARG(BatchAmount, val_check_interval);
  /// Validate every N epochs; unset (null in a config): by val_check_interval alone, a count of
  /// batches over the whole fit that may span epochs, as Lightning's check_val_every_n_epoch=None.
  ARC_ARG(std::optional<int64_t>, check_val_every_n_epoch) = 1;
  /// -1 runs every validation batch before training.
  ARC_ARG(int64_t, num_sanity_val_steps) = 2;
  /// Asks the data module (or module) for its training loader again at every n-th epoch's start,
  /// and for the validation loaders when n epochs passed since they came (0: once per fit).
  ARC_ARG(int64_t, reload_dataloaders_every_n_epochs) = 0;
  /// Each rank reads its own share of every dataset (a DistributedSampler's); false gives every
  /// rank the whole source as it is, for data the user shards (by Trainer::global_rank()).
  ARC_ARG(bool, use_distributed_sampler) = true;
  /// When the ranks' training data has different batch counts per epoch (user-sharded data, or
  /// each rank given its own dataset): "error" fails at the epoch's start naming the counts; "pad"
  /// lets the ranks with fewer batches repeat their epoch's first batches up to the most (Fabric's
  /// even_batches=True); "drop" ends the epoch on every rank at the fewest. A stream always ends at
  /// the shortest share.
  ARC_ARG(std::string, even_batches) = "error";
  /// Training steps (Progress::stepped_batches) between the step metrics sent to the loggers.
  ARC_ARG(int64_t, log_every_n_steps) = 50;
  /// Batches whose gradients add up to one optimizer step.
  ARC_ARG(int64_t, accumulate_grad_batches) = 1;
  /// Clip the gradients to this total norm or value before each automatic optimizer step (unset or
  /// 0: no clipping).
  ARC_ARG(std::optional<double>, gradient_clip_val);
  /// "norm" or "value".
  ARC_ARG(std::string, gradient_clip_algorithm) = "norm";
  /// Deterministic algorithms only (and cuDNN's deterministic ones); "warn" warns where an operation
  /// has none instead of failing.
  ARC_ARG(Determinism, deterministic);
  /// LibTorch's anomaly detection during the stage: a backward that produces NaN fails naming the
  /// operation whose gradient it was (slow; for debugging).
  ARC_ARG(bool, detect_anomaly) = false;
  /// Validation, test and predict run under c10::InferenceMode (faster than no_grad; their tensors
  /// cannot enter autograd later); false runs them under no_grad.
  ARC_ARG(bool, inference_mode) = true;
  /// cuDNN picks the fastest convolution algorithm for each input shape; unset leaves LibTorch's
  /// setting, or turns it off under `deterministic`.
  ARC_ARG(std::optional<bool>, benchmark);
  /// Seeds LibTorch's generators when each stage starts, and the data order (unset: the generators
  /// are not seeded, and the order takes seed 0).
  ARC_ARG(std::optional<uint64_t>, seed);
  /// 0 is off; n runs n batches of every stage once, without sanity checks or side effects.
  ARC_ARG(int64_t, fast_dev_run) = 0;

 public:
  /// Lightning's barebones mode, for measuring the Trainer's own overhead: setting it on turns off
  /// what may cost speed (checkpointing, the loggers, the progress bar, the model summary, sanity
  /// checking), and log() does nothing but warn once. Turning one of them on again afterwards, or
  /// fast_dev_run, detect_anomaly or a profiler, is an error; so are loggers and a ModelCheckpoint,
  /// ProgressBar or ModelSummary given to the Trainer.
  TrainerOptions& barebones(bool on);
  /// Whether barebones mode is on.
  bool barebones() const { return barebones_; }

 private:
  bool barebones_ = false;
  /// The folder of logs and checkpoints (the default loggers' save_dir).
  ARC_ARG(std::string, default_root_dir) = ".";
  /// "auto", "cpu", "gpu" or "cuda".
  ARC_ARG(std::string, accelerator) = "auto";
  /// "auto" or a registered strategy name.
  ARC_ARG(std::string, strategy) = "auto";
  /// "auto", a count (-1 = all), indices: `devices(2)`, `devices({0, 1})`, `devices("auto")`.
  ARC_ARG(Devices, devices);
  /// Machines the run spans.
  ARC_ARG(int64_t, num_nodes) = 1;
  /// Lightning's names: "32-true" (also "32"), "64-true", "bf16-mixed", "16-mixed", "bf16-true",
  /// "16-true" (see Precision).
  ARC_ARG(std::string, precision) = "32-true";
  /// Lightning's logger=True: a Trainer given no loggers writes metrics.csv, TensorBoard events and
  /// hparams.yaml to `<default_root_dir>/lightning_logs/version_N` (its checkpoints go to that folder's
  /// checkpoints/); false writes none.
  ARC_ARG(bool, logger) = true;
  /// Add a ModelCheckpoint (with last.ckpt) unless the callbacks have one.
  ARC_ARG(bool, enable_checkpointing) = true;
  /// Checkpoints saved during fit are written by a background thread: the save copies the state
  /// into a reusable host buffer and training goes on; a failed write fails fit at the next batch.
  /// SIGTERM, requeue and exception saves stay synchronous.
  ARC_ARG(bool, async_checkpointing) = false;
  /// Add the progress bar unless the callbacks have one.
  ARC_ARG(bool, enable_progress_bar) = true;
  /// Add the model summary at fit start unless the callbacks have one.
  ARC_ARG(bool, enable_model_summary) = true;
  /// Lightning's profiler: "simple" times every hook, step, backward, optimizer step, data fetch and
  /// gradient all-reduce and reports them at the end of each stage (also in
  /// `<log_dir>/<stage>-profile.txt`); "advanced" (also "pytorch") adds LibTorch's operators over a few
  /// training batches and a Chrome trace; "" profiles nothing. A ProfilerSpec also says where the
  /// report goes, as Lightning's profiler classes' dirpath and filename. A Profiler given to the
  /// Trainer replaces this option.
  ARC_ARG(ProfilerSpec, profiler);
  /// Intra-op threads per process; 0 = all cores for one process.
  ARC_ARG(int64_t, num_threads) = 0;
  /// Keep large activation buffers in the heap instead of returning them to the OS every step.
  ARC_ARG(bool, tune_malloc) = true;
  /// "auto" (detect: torchelastic > slurm > lsf > mpi > kubeflow > local) or one of those names.
  ARC_ARG(std::string, cluster_environment) = "auto";
  /// DDP: the model's arc::SyncBatchNorm layers normalize training batches with the statistics of
  /// every rank's samples together (Lightning's sync_batchnorm; a torch::nn::BatchNorm is an error).
  ARC_ARG(bool, sync_batchnorm) = false;
  /// The DDP strategy's settings, as Lightning's DDPStrategy takes them (ddp, ddp_spawn and elastic
  /// read them): timeout, collective_timeout, process_group_backend, find_unused_parameters,
  /// static_graph, gradient_as_bucket_view, bucket sizes, shared memory. Configs set them as
  /// init_args of `strategy: {class_path: DDPStrategy}` or as the trainer keys of the same names.
  ARC_ARG(DDPStrategyOptions, ddp);
  /// The SLURM environment's settings, as Lightning's SLURMEnvironment(auto_requeue, requeue_signal):
  /// on `requeue_signal` (sbatch --signal=USR1@60 sends it before the time limit) save
  /// hpc_ckpt_<n>.ckpt at the next batch boundary and requeue the job (`scontrol requeue`); the
  /// requeued job resumes from it.
  ARC_ARG(cluster::SlurmEnvironmentOptions, slurm);
  /// Strategy "elastic": global steps between the strategy's own checkpoints (0: rely on
  /// ModelCheckpoint's files alone).
  ARC_ARG(int64_t, elastic_checkpoint_every_n_steps) = 50;
  /// Strategy "elastic": seconds between those checkpoints as well (0: by steps only).
  ARC_ARG(double, elastic_checkpoint_every_seconds) = 0.0;

 public:
  /// The options a Fabric reads (every launch setting), for resolving this run as a Fabric does.
  FabricOptions fabric_options() const;
  /// Reads options from a JSON object; unknown keys, wrong types and impossible values throw.
  static TrainerOptions from_json(const nlohmann::json& json);
  /// Every option as JSON; from_json(to_json()) gives the same options.
  nlohmann::json to_json() const;
  /// Throws arc::Error naming the first impossible value and the remedy.
  void validate() const;
  /// Every option's key, default and one line of help, from the table from_json reads.
  static std::vector<OptionHelp> help();
  /// Lightning's plugins that trainer.plugins takes (each stands for options: SLURMEnvironment for
  /// cluster_environment, auto_requeue and requeue_signal, MixedPrecision for precision, ...).
  static const std::vector<std::string>& plugin_names();
  /// Sets the options that plugin `name` with `init_args` stands for; an unknown name is an error.
  void apply_plugin(const std::string& name, const Config& init_args);
};

}  // namespace arc
