// ElasticCheckpoint: strategy elastic's own periodic checkpoint, one file replaced atomically,
// so that a group torchrun restarts loses at most the steps since the last one.
#pragma once

#include <arc/core/callback.h>

#include <chrono>
#include <string>

namespace arc {

/// Writes `<default_root_dir>/elastic_last.ckpt` every `every_n_steps` global steps and, when
/// `every_seconds` > 0, also once that many seconds have passed since the last write.
class ElasticCheckpoint : public Callback {
 public:
  /// Writes every `every_n_steps` global steps (0: not by steps) and every `every_seconds` (0: not by
  /// the clock).
  ElasticCheckpoint(int64_t every_n_steps, double every_seconds);
  std::string state_key() const override { return "ElasticCheckpoint"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  /// "resume": its file, once written.
  std::vector<std::string> checkpoint_files(const std::string& kind, const Trainer& trainer) const override;
  /// Where it writes for `trainer`.
  static std::string path(const Trainer& trainer);

 private:
  int64_t every_n_steps_;
  double every_seconds_;
  int64_t last_saved_step_ = -1;
  std::chrono::steady_clock::time_point last_save_time_;
};

}  // namespace arc
