// LearningRateFinder.
#include <arc/callbacks/learning_rate_finder.h>

#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/core/trainer.h>

#include <utility>

namespace arc {

LearningRateFinder::LearningRateFinder(LRFinderOptions options, bool update_attr, std::string attr_name)
    : options_(std::move(options)), update_attr_(update_attr), attr_name_(std::move(attr_name)) {
  options_.mode(lowercase(options_.mode()));  // as Lightning's
  check_lr_finder_options(options_);
}

void LearningRateFinder::on_fit_start(Trainer& trainer, TrainModule& module) {
  if (trainer.options().fast_dev_run()) {
    if (trainer.is_global_zero()) console().warn("LearningRateFinder: skipped, since fast_dev_run is on");
    return;
  }
  if (trainer.global_step() > 0 || trainer.current_epoch() > 0) {
    if (trainer.is_global_zero())
      console().info("LearningRateFinder: the resumed fit keeps the checkpoint's learning rates (no new test)");
    return;
  }
  lr_find(trainer, module);
}

void LearningRateFinder::lr_find(Trainer& trainer, TrainModule& module) {
  optimal_lr_ =
      Tuner(trainer).lr_find_in_fit(module, options_, update_attr_ ? std::optional(attr_name_) : std::nullopt);
}

}  // namespace arc
