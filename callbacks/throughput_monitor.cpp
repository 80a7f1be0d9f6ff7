// ThroughputMonitor.
#include <arc/callbacks/throughput_monitor.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

namespace arc {

ThroughputMonitor::ThroughputMonitor(int64_t every_n_steps) : every_(every_n_steps) {
  ARC_CHECK(every_ >= 1, "ThroughputMonitor every_n_steps must be >= 1, got ", every_);
}

void ThroughputMonitor::on_train_epoch_start(Trainer&, TrainModule&) {
  window_start_ = std::chrono::steady_clock::now();
  samples_ = batches_ = 0;
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch& batch,
                                           int64_t) {
  samples_ += batch.batch_size() * trainer.world_size();
  ++batches_;
  if (batches_ % every_ != 0) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start_).count();
  last_rate_ = static_cast<double>(samples_) / seconds;
  trainer.log_to_loggers({{"throughput/samples_per_sec", last_rate_},
                          {"throughput/batches_per_sec", static_cast<double>(batches_) / seconds}});
  window_start_ = std::chrono::steady_clock::now();
  samples_ = batches_ = 0;
}

}  // namespace arc
