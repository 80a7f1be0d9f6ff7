// EarlyStopping.
#include <arc/callbacks/early_stopping.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/metric_store.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>

#include <cmath>

namespace arc {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  ARC_CHECK(!options_.monitor().empty(), "EarlyStopping needs a metric to monitor, e.g. \"val_loss\"");
  ARC_CHECK(options_.mode() == "min" || options_.mode() == "max",
            "EarlyStopping mode must be \"min\" or \"max\", got \"", options_.mode(), "\"");
  ARC_CHECK(options_.patience() >= 0, "EarlyStopping patience must be >= 0, got ", options_.patience());
  ARC_CHECK(options_.min_delta() >= 0, "EarlyStopping min_delta must be >= 0, got ", options_.min_delta());
}

std::string EarlyStopping::check(double value) {
  const bool minimize = options_.mode() == "min";
  const std::string& name = options_.monitor();
  if (options_.check_finite() && !std::isfinite(value))
    return fmt::format("{} = {} is not finite; the run diverged", name, value);
  if (options_.stopping_threshold() &&
      (minimize ? value < *options_.stopping_threshold() : value > *options_.stopping_threshold()))
    return fmt::format("{} = {:.6g} reached the stopping threshold {}", name, value, *options_.stopping_threshold());
  if (options_.divergence_threshold() &&
      (minimize ? value > *options_.divergence_threshold() : value < *options_.divergence_threshold()))
    return fmt::format("{} = {:.6g} crossed the divergence threshold {}", name, value,
                       *options_.divergence_threshold());
  const bool improved =
      !best_ || (minimize ? value < *best_ - options_.min_delta() : value > *best_ + options_.min_delta());
  if (improved) {
    if (options_.verbose())
      console().info(best_
                         ? fmt::format("EarlyStopping: {} improved by {:.6g} >= min_delta = {}; new best score {:.6g}",
                                       name, std::abs(*best_ - value), options_.min_delta(), value)
                         : fmt::format("EarlyStopping: {} improved; new best score {:.6g}", name, value));
    best_ = value;
    wait_ = 0;
    return "";
  }
  if (++wait_ < std::max<int64_t>(options_.patience(), 1)) return "";
  return fmt::format("{} did not improve by more than {} for {} validation checks; best {:.6g}", name,
                     options_.min_delta(), wait_, *best_);
}

// Lightning's default: at the epoch's end when validation runs once an epoch at that end (or never),
// after each validation run otherwise.
void EarlyStopping::on_fit_start(Trainer& trainer, TrainModule&) {
  const auto& o = trainer.options();
  const auto& interval = o.val_check_interval();
  at_epoch_end_ = options_.check_on_train_epoch_end().value_or(interval.is_fraction && interval.value == 1.0 &&
                                                               o.check_val_every_n_epoch() == 1);
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (at_epoch_end_) run_check(trainer);
}

void EarlyStopping::on_validation_end(Trainer& trainer, TrainModule&) {
  if (!at_epoch_end_ && !trainer.sanity_checking()) run_check(trainer);
}

void EarlyStopping::run_check(Trainer& trainer) {
  // fast_dev_run checks that the code runs; like Lightning, it stops nothing early.
  if (trainer.stage() != Stage::fit || trainer.options().fast_dev_run() > 0) return;
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  if (found == metrics.end()) {
    const auto message = fmt::format(
        "EarlyStopping monitors '{}', which was not logged{} (logged: {}); log it with on_epoch, change monitor, or "
        "set strict=false to skip the check then",
        options_.monitor(), at_epoch_end_ ? " by the end of the training epoch" : " in validation",
        metric_names(metrics, options_.monitor()));
    ARC_CHECK(!options_.strict(), message);
    if (options_.verbose()) console().warn("{}", message);
    return;
  }
  const std::string reason = check(found->second);
  if (reason.empty()) return;
  reason_ = reason;
  trainer.request_stop("EarlyStopping: " + reason);
}

nlohmann::json EarlyStopping::state_dict() const {
  return {{"best", best_ ? nlohmann::json(*best_) : nlohmann::json(nullptr)}, {"wait", wait_}};
}

void EarlyStopping::load_state_dict(const nlohmann::json& state) {
  best_ = state.at("best").is_null() ? std::nullopt : std::optional<double>(state.at("best").get<double>());
  wait_ = state.at("wait").get<int64_t>();
}

}  // namespace arc
