// EarlyStopping.
#include <arc/callbacks/early_stopping.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
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
    best_ = value;
    wait_ = 0;
    return "";
  }
  if (++wait_ < std::max<int64_t>(options_.patience(), 1)) return "";
  return fmt::format("{} did not improve by more than {} for {} validation checks; best {:.6g}", name,
                     options_.min_delta(), wait_, *best_);
}

void EarlyStopping::on_validation_end(Trainer& trainer, TrainModule&) {
  // fast_dev_run checks that the code runs; like Lightning, it stops nothing early.
  if (trainer.sanity_checking() || trainer.stage() != Stage::fit || trainer.options().fast_dev_run() > 0) return;
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  ARC_CHECK(found != metrics.end(), "EarlyStopping monitors '", options_.monitor(),
            "', which was not logged in validation; log it (with on_epoch) or change monitor");
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
