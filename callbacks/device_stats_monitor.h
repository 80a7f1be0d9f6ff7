// DeviceStatsMonitor: logs the device's utilisation and memory figures around training batches.
#pragma once

#include <arc/core/callback.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace arc {

class CpuAccelerator;

/// Every log_every_n_steps batches, logs the accelerator's device_stats() at batch start and end
/// as "DeviceStatsMonitor.on_train_batch_start/<stat>" and ".../on_train_batch_end/<stat>", as
/// Lightning does. `cpu_stats`: unset logs the CPU's figures when training on the CPU only; true
/// adds them on a GPU too; false logs none on the CPU.
class DeviceStatsMonitor : public Callback {
 public:
  /// Logs the CPU's figures as `cpu_stats` says.
  explicit DeviceStatsMonitor(std::optional<bool> cpu_stats = std::nullopt);
  ~DeviceStatsMonitor() override;
  std::string state_key() const override { return "DeviceStatsMonitor"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, Batch& batch, int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& outputs, Batch& batch,
                          int64_t batch_idx) override;

 private:
  // Logs on the batches whose step metrics are logged (Trainer::logging_batch).
  void log_stats(Trainer& trainer, const std::string& hook);

  std::optional<bool> cpu_stats_;
  // The CPU's figures next to a GPU's (cpu_stats true).
  std::unique_ptr<CpuAccelerator> cpu_;
};

}  // namespace arc
