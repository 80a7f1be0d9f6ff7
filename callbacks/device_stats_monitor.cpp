// DeviceStatsMonitor.
#include <arc/callbacks/device_stats_monitor.h>

#include <arc/accelerators/cpu_accelerator.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>

namespace arc {

DeviceStatsMonitor::DeviceStatsMonitor(std::optional<bool> cpu_stats) : cpu_stats_(cpu_stats) {}

DeviceStatsMonitor::~DeviceStatsMonitor() = default;

void DeviceStatsMonitor::on_fit_start(Trainer& trainer, TrainModule&) {
  ARC_CHECK(!trainer.loggers().empty(),
            "DeviceStatsMonitor logs to the loggers, and this Trainer has none; add a logger (e.g. CSVLogger) or "
            "remove the callback");
  if (cpu_stats_.value_or(false) && !trainer.device().is_cpu()) cpu_ = std::make_unique<CpuAccelerator>();
}

void DeviceStatsMonitor::on_train_batch_start(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  log_stats(trainer, "on_train_batch_start");
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  log_stats(trainer, "on_train_batch_end");
}

void DeviceStatsMonitor::log_stats(Trainer& trainer, const std::string& hook) {
  if (!trainer.logging_batch()) return;
  const auto device = trainer.device();
  if (cpu_stats_ == false && device.is_cpu()) return;
  auto stats = trainer.accelerator().device_stats(device);
  if (cpu_) stats.merge(cpu_->device_stats(c10::Device(c10::kCPU)));
  Metrics prefixed;
  for (const auto& [name, value] : stats) prefixed["DeviceStatsMonitor." + hook + "/" + name] = value;
  trainer.log_to_loggers(prefixed);
}

}  // namespace arc
