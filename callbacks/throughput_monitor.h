// ThroughputMonitor: samples, batches and FLOPs per second of training, and the model FLOPs
// utilization, logged every N steps.
#pragma once

#include <arc/core/callback.h>

#include <chrono>

namespace arc {

/// Logs "throughput/samples_per_sec" and "throughput/batches_per_sec" (global, all ranks) and
/// "throughput/device/samples_per_sec" (one rank's share); told the FLOPs of training one sample,
/// "throughput/flops_per_sec" and "throughput/device/flops_per_sec" too, and told a device's peak,
/// "throughput/device/mfu", as Lightning's.
class ThroughputMonitor : public Callback {
 public:
  /// Logs every `every_n_steps` training batches (at least 1), counted from each epoch's start.
  /// `flops_per_sample`: the FLOPs of one sample's forward and backward (0: unknown, no FLOPs
  /// logged); `available_flops`: one device's peak FLOP/s in the run's precision (0: unknown, no MFU).
  explicit ThroughputMonitor(int64_t every_n_steps = 50, double flops_per_sample = 0, double available_flops = 0);
  std::string state_key() const override { return "ThroughputMonitor"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  /// The samples per second it logged last (0 before).
  double last_samples_per_sec() const { return last_rate_; }

 private:
  int64_t every_;
  double flops_per_sample_;
  double available_flops_;
  int64_t samples_ = 0;
  int64_t batches_ = 0;
  double last_rate_ = 0;
  std::chrono::steady_clock::time_point window_start_;
};

}  // namespace arc
