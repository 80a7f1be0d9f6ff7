// Timer.
#include <arc/callbacks/timer.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>

namespace arc {

Timer::Timer(double seconds, const std::string& interval)
    : limit_(seconds), interval_(interval_named(interval, "Timer interval")) {
  ARC_CHECK(seconds > 0, "Timer needs a positive duration in seconds, got ", seconds);
}

double Timer::elapsed() const { return carried_ + std::chrono::duration<double>(Clock::now() - start_).count(); }

void Timer::on_fit_start(Trainer&, TrainModule&) { start_ = Clock::now(); }

void Timer::check(Trainer& trainer) const {
  if (elapsed() >= limit_)
    trainer.request_stop(fmt::format("Timer: {:.1f} s of the {:.1f} s allowed have passed", elapsed(), limit_));
}

void Timer::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  if (interval_ == Interval::step) check(trainer);
}

void Timer::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (interval_ == Interval::epoch) check(trainer);
}

void Timer::on_validation_start(Trainer&, TrainModule&) { validation_start_ = Clock::now(); }

void Timer::on_validation_end(Trainer&, TrainModule&) {
  validation_ += std::chrono::duration<double>(Clock::now() - validation_start_).count();
}

}  // namespace arc
