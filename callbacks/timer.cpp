// Timer.
#include <arc/callbacks/timer.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>

namespace arc {

Timer::Timer(double seconds, std::string interval) : limit_(seconds), interval_(std::move(interval)) {
  ARC_CHECK(seconds > 0, "Timer needs a positive duration in seconds, got ", seconds);
  ARC_CHECK(interval_ == "step" || interval_ == "epoch", "Timer interval must be \"step\" or \"epoch\", got \"",
            interval_, "\"");
}

double Timer::elapsed() const { return carried_ + std::chrono::duration<double>(Clock::now() - start_).count(); }

void Timer::on_fit_start(Trainer&, TrainModule&) { start_ = Clock::now(); }

void Timer::check(Trainer& trainer) const {
  if (elapsed() >= limit_)
    trainer.request_stop(fmt::format("Timer: {:.1f} s of the {:.1f} s allowed have passed", elapsed(), limit_));
}

void Timer::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  if (interval_ == "step") check(trainer);
}

void Timer::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (interval_ == "epoch") check(trainer);
}

void Timer::on_validation_start(Trainer&, TrainModule&) { validation_start_ = Clock::now(); }

void Timer::on_validation_end(Trainer&, TrainModule&) {
  validation_ += std::chrono::duration<double>(Clock::now() - validation_start_).count();
}

}  // namespace arc
