// CheckpointConnector: what a checkpoint holds for the Trainer (model, optimizers, schedulers,
// progress, gradients mid-accumulation, RNG, callback and data module states) and how a run
// resumes from one.
#pragma once

#include <torch/types.h>
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>

namespace arc {

class AsyncCheckpointWriter;
class CheckpointReader;
class CheckpointWriter;
class DataModule;
class Trainer;
class TrainModule;

namespace detail {
struct RunState;
}

/// The CPU generator's state, which checkpoints keep (and LearningRateFinder's sweep puts back).
torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

/// Saves and restores the Trainer's state.
class CheckpointConnector {
 public:
  CheckpointConnector(Trainer& trainer, detail::RunState& state) : trainer_(trainer), state_(state) {}

  /// Writes the checkpoint (from rank 0; every rank calls it, as a sharded strategy gathers the
  /// optimizer state and parameters for it), or, `in_background`, copies its state and leaves the
  /// file to the RunState's AsyncCheckpointWriter. A synchronous save first waits for the background
  /// write in flight. With the strategy's sharded checkpoints every rank writes its own file, at
  /// once, `in_background` or not.
  void save(TrainModule& module, const std::string& path, bool weights_only, bool in_background = false);
  /// Restores everything for resuming fit, the loggers' versions included.
  void restore_training(TrainModule& module, const std::string& path);
  /// The training batch size BatchSizeFinder chose for the run that wrote `path`; none when it chose
  /// none.
  static std::optional<int64_t> train_batch_size(const std::string& path);
  /// Gives `data` (when there is one) the state that the checkpoint at `path` keeps of it, if any.
  static void restore_data_module(DataModule* data, const std::string& path);
  /// Restores only the module's weights (validate, test, predict).
  void restore_weights(TrainModule& module, const std::string& path);
  /// "last" and "best" through the ModelCheckpoint callback ("last": the newest last.ckpt, among
  /// the loggers' versions when checkpoints go to the default <log_dir>/checkpoints), "hpc" the
  /// highest-numbered hpc_ckpt_<n>.ckpt in default_root_dir; any other text is a path.
  std::string resolve(const std::string& ckpt_path) const;
  /// What fit resumes from: as resolve, but "last" before any last.ckpt exists is "" (a fresh start,
  /// with a warning), as Lightning's, so that a job may give "last" to every run, the first included.
  std::string resolve_resume(const std::string& ckpt_path) const;
  /// `<folder>/hpc_ckpt_<n>.ckpt`, n one more than the highest there (Lightning's name); `folder` is
  /// the default_root_dir.
  static std::string hpc_save_path(const std::string& folder);
  /// The error of rank 0's background write that failed (only rank 0 writes), as every rank reports
  /// it: broadcast where several ranks train, so every rank must call; "" when none failed.
  static std::string rank_zero_write_failure(Trainer& trainer, AsyncCheckpointWriter& writes);
  /// What fit resumes from by itself, newest first: an hpc_ckpt_<n>.ckpt in default_root_dir and,
  /// under strategy elastic, also elastic_last.ckpt and ModelCheckpoint's files. Files without a
  /// readable index are skipped with a warning; "" when there is none.
  std::string automatic_resume_path() const;

 private:
  /// Whether the run stands between two batches of one accumulation.
  bool mid_accumulation() const;
  /// What the checkpoint's metadata holds: progress, callbacks', loggers' and schedulers' states, ...
  nlohmann::json checkpoint_meta(TrainModule& module, bool weights_only) const;
  void add_resume_state(CheckpointWriter& writer, TrainModule& module);
  /// save's work for a full checkpoint, with every parameter whole.
  void save_whole(TrainModule& module, const std::string& path, bool weights_only, bool in_background);
  /// save's work for a sharded checkpoint (the strategy's state_dict_type "sharded").
  void save_sharded(TrainModule& module, const std::string& path, bool weights_only);
  /// restore_training's work, once the file is open and verified.
  void restore_training(TrainModule& module, const CheckpointReader& checkpoint);
  void restore_logger_versions(const nlohmann::json& saved);
  std::string newest_hpc_checkpoint() const;
  /// Where "last" and "best" look without a ModelCheckpoint dirpath, as the errors name it.
  std::string searched_folders() const;
  /// The newest last.ckpt that "last" may mean (the callbacks', else the default folder's and its
  /// versions'); none when there is none.
  std::optional<std::string> newest_last() const;

  Trainer& trainer_;
  detail::RunState& state_;
  bool warned_synchronous_ = false;
};

}  // namespace arc
