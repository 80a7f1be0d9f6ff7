// ThroughputMonitor: samples and batches per second of training, logged every N steps.
#pragma once

#include <arc/core/callback.h>

#include <chrono>

namespace arc {

/// Logs "throughput/samples_per_sec" and "throughput/batches_per_sec" (global, all ranks).
class ThroughputMonitor : public Callback {
 public:
  /// Logs every `every_n_steps` training batches (at least 1), counted from each epoch's start.
  explicit ThroughputMonitor(int64_t every_n_steps = 50);
  std::string state_key() const override { return "ThroughputMonitor"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  /// The samples per second it logged last (0 before).
  double last_samples_per_sec() const { return last_rate_; }

 private:
  int64_t every_;
  int64_t samples_ = 0;
  int64_t batches_ = 0;
  double last_rate_ = 0;
  std::chrono::steady_clock::time_point window_start_;
};

}  // namespace arc
