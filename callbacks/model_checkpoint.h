// ModelCheckpoint: saves checkpoints during fit — every N steps, N epochs or after validation —
// keeps the best save_top_k by a monitored metric, and optionally last.ckpt, as Lightning's.
#pragma once

#include <arc/base/arg.h>
#include <arc/core/callback.h>

#include <map>
#include <optional>
#include <string>

namespace arc {

/// ModelCheckpoint's save_last: false, true (last.ckpt written at every save) or "link" (last.ckpt a
/// symbolic link to the file the save wrote, written as with true when it wrote none).
class SaveLast {
 public:
  /// false or true.
  SaveLast(bool on = false) : on_(on) {}
  /// "link"; any other text is an error.
  SaveLast(const std::string& mode);
  /// The same as from a std::string.
  SaveLast(const char* mode) : SaveLast(std::string(mode)) {}
  /// Whether last.ckpt is kept.
  explicit operator bool() const { return on_; }
  /// Whether last.ckpt links to the file of each save.
  bool link() const { return link_; }

 private:
  bool on_ = false;
  bool link_ = false;
};

/// save_last in configs: true, false, "link" (null: false).
///@{
void to_json(nlohmann::json& json, const SaveLast& save_last);
void from_json(const nlohmann::json& json, SaveLast& save_last);
///@}

/// ModelCheckpoint's settings (Lightning's names and defaults).
class ModelCheckpointOptions {
 public:
  /// Folder; empty = `<log_dir>/checkpoints`.
  ARC_ARG(std::string, dirpath);
  /// Template with metrics: "{epoch}-{step}-{val_loss:.3f}"; ".ckpt" is appended.
  ARC_ARG(std::string, filename) = "{epoch}-{step}";
  /// Metric that ranks checkpoints; empty keeps the most recent ones.
  ARC_ARG(std::string, monitor);
  /// "min" or "max".
  ARC_ARG(std::string, mode) = "min";
  /// How many to keep: -1 all, 0 none (last.ckpt still written when save_last).
  ARC_ARG(int64_t, save_top_k) = 1;
  /// Also write last.ckpt at every save, replacing the previous one; "link": make it a link to the
  /// file the save wrote.
  ARC_ARG(SaveLast, save_last) = false;
  /// Save every N optimizer steps (0: off).
  ARC_ARG(int64_t, every_n_train_steps) = 0;
  /// Save every N epochs, after validation if it ran (0: off; off too with every_n_train_steps or
  /// train_time_interval, as Lightning's default).
  ARC_ARG(int64_t, every_n_epochs) = 1;
  /// Save when this many seconds passed since the last save (0: off), by the clock that the ranks
  /// agree on (Trainer::agreed_elapsed_seconds).
  ARC_ARG(double, train_time_interval) = 0;
  /// Save the module's weights without the optimizers' state: for validate, test or predict; fit
  /// cannot resume from such a file.
  ARC_ARG(bool, save_weights_only) = false;
  /// Written by a background thread after a copy of the state (unset: the Trainer's async_checkpointing).
  ARC_ARG(std::optional<bool>, async_checkpointing);
  /// "{epoch}" becomes "epoch=3".
  ARC_ARG(bool, auto_insert_metric_name) = true;
  /// Say each save, and each monitored value that was not in the top k (rank 0).
  ARC_ARG(bool, verbose) = false;
  /// The every_n_epochs save at each training epoch's end, or false: after validation only. Unset:
  /// after validation when it ran in the epoch, else at the epoch's end.
  ARC_ARG(std::optional<bool>, save_on_train_epoch_end);
  /// A name that a file already has (another run's, or this run's) gets "-v1", "-v2", ... before
  /// ".ckpt" instead of replacing it, as Lightning's; last.ckpt is replaced, so that
  /// ckpt_path="last" finds it.
  ARC_ARG(bool, enable_version_counter) = true;
  /// When fit fails after a step was trained (an error in a step, Ctrl-C, SIGTERM), save where it
  /// stopped: a file named by `filename` (and last.ckpt under save_last), kept beside the top k.
  ARC_ARG(bool, save_on_exception) = false;
};

/// Writes checkpoints through Trainer::save_checkpoint. Every rank runs it and takes the same
/// decisions (monitored metrics are synced); only rank 0 touches files.
class ModelCheckpoint : public Callback {
 public:
  /// Saves as `options` say.
  explicit ModelCheckpoint(ModelCheckpointOptions options = ModelCheckpointOptions());

  std::string state_key() const override;
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;
  std::string exception_checkpoint() const override { return exception_path_; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  /// "best": the best file of this fit or, without one, the best that the newest checkpoint with
  /// this callback's state (same monitor, mode and intervals) names, in its folder or, in the default
  /// folder (`<log_dir>/checkpoints`), in any version's; "last": last.ckpt there; "resume": every
  /// .ckpt in its folder.
  std::vector<std::string> checkpoint_files(const std::string& kind, const Trainer& trainer) const override;

  /// The best kept checkpoint by the monitored metric (without a monitor, the newest); "" before any.
  const std::string& best_model_path() const { return best_path_; }
  /// The monitored value of best_model_path(); none without a monitor or a save.
  std::optional<double> best_model_score() const;
  /// The last.ckpt written under save_last; "" before any.
  const std::string& last_model_path() const { return last_path_; }
  /// The folder checkpoints go to (known once fit started).
  const std::string& dirpath() const { return dirpath_; }
  /// The options it was made with.
  const ModelCheckpointOptions& options() const { return options_; }
  /// Name for the given metrics: "epoch=0-step=100-val_loss=0.123.ckpt".
  std::string format_name(const std::map<std::string, double>& metrics) const;

 private:
  void save(Trainer& trainer);
  /// Where checkpoints go (or will go, before fit starts).
  std::string folder(const Trainer& trainer) const;
  bool better(double candidate, double reference) const;
  /// every_n_train_steps or train_time_interval is set, which turn the saves by epoch off, as they do
  /// Lightning's default every_n_epochs.
  bool saves_by_step_or_time() const {
    return options_.every_n_train_steps() > 0 || options_.train_time_interval() > 0;
  }
  /// `path`, or with "-vN" where a file has that name already (not `replaced`), as rank 0 sees it
  /// (`agree`: every rank takes rank 0's name; else each its own, with no collective).
  std::string free_name(Trainer& trainer, const std::string& path, const std::string& replaced,
                        bool agree = true) const;
  /// last.ckpt under save_last: a link to `saved` (the file this save kept, "" for none) under
  /// "link", else a file of its own, written `in_background` as save_checkpoint takes it.
  void save_last(Trainer& trainer, const std::string& saved, std::optional<bool> in_background);

  ModelCheckpointOptions options_;
  std::string dirpath_;
  std::map<std::string, double> kept_;  // path → score (or save order without monitor)
  std::string best_path_;
  std::string last_path_;
  int64_t saves_ = 0;
  int64_t last_saved_step_ = -1;
  int64_t validations_at_epoch_start_ = 0;
  /// Trainer::agreed_elapsed_seconds at the last save (or at the fit's start).
  double last_save_seconds_ = 0;
  /// The global step when this fit's training started (none before): save_on_exception saves only
  /// what was trained since.
  std::optional<int64_t> step_at_train_start_;
  /// The file save_on_exception wrote; "" before.
  std::string exception_path_;
};

}  // namespace arc
