// GradientAccumulationScheduler.
#include <arc/callbacks/gradient_accumulation_scheduler.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

namespace arc {

GradientAccumulationScheduler::GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling)
    : scheduling_(std::move(scheduling)) {
  ARC_CHECK(!scheduling_.empty(), "GradientAccumulationScheduler needs at least one {epoch: factor} entry");
  for (const auto& [epoch, factor] : scheduling_)
    ARC_CHECK(epoch >= 0 && factor >= 1, "GradientAccumulationScheduler entries need epoch >= 0 and factor >= 1, got {",
              epoch, ": ", factor, "}");
}

int64_t GradientAccumulationScheduler::factor(int64_t epoch) const {
  int64_t current = 1;
  for (const auto& [from, value] : scheduling_)
    if (epoch >= from) current = value;
  return current;
}

void GradientAccumulationScheduler::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  trainer.set_accumulate_grad_batches(factor(trainer.current_epoch()));
}

}  // namespace arc
