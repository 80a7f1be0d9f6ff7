// ThroughputMonitor.
#include <arc/callbacks/throughput_monitor.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

namespace arc {

ThroughputMonitor::ThroughputMonitor(int64_t every_n_steps, double flops_per_sample, double available_flops)
    : every_(every_n_steps), flops_per_sample_(flops_per_sample), available_flops_(available_flops) {
  ARC_CHECK(every_ >= 1, "ThroughputMonitor every_n_steps must be >= 1, got ", every_);
  ARC_CHECK(flops_per_sample_ >= 0 && available_flops_ >= 0,
            "ThroughputMonitor flops_per_sample and available_flops must be >= 0 (0: unknown), got ", flops_per_sample_,
            " and ", available_flops_);
  ARC_CHECK(available_flops_ == 0 || flops_per_sample_ > 0, "ThroughputMonitor available_flops (", available_flops_,
            ") gives the model FLOPs utilization only with flops_per_sample, the FLOPs of training one sample; ",
            "give both, or neither");
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
  const double ranks = static_cast<double>(trainer.world_size());
  Metrics values = {{"throughput/samples_per_sec", last_rate_},
                    {"throughput/batches_per_sec", static_cast<double>(batches_) / seconds},
                    {"throughput/device/samples_per_sec", last_rate_ / ranks}};
  if (flops_per_sample_ > 0) {
    const double flops = last_rate_ * flops_per_sample_;
    values["throughput/flops_per_sec"] = flops;
    values["throughput/device/flops_per_sec"] = flops / ranks;
    if (available_flops_ > 0) values["throughput/device/mfu"] = flops / ranks / available_flops_;
  }
  trainer.log_to_loggers(values);
  window_start_ = std::chrono::steady_clock::now();
  samples_ = batches_ = 0;
}

}  // namespace arc
