// GradScaler: dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler does it:
// scale the loss, unscale the gradients before clipping and stepping, skip steps whose gradients
// hold inf/NaN, back the scale off after such a step and grow it after growth_interval clean ones.
#pragma once

#include <arc/base/arg.h>

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <map>

namespace torch::optim {
class Optimizer;
}

namespace arc {

/// GradScaler's settings, with torch.amp.GradScaler's defaults.
class GradScalerOptions {
  /// The first loss scale.
  ARC_ARG(double, init_scale) = 65536.0;
  /// What the scale is multiplied by after growth_interval steps without inf/NaN gradients.
  ARC_ARG(double, growth_factor) = 2.0;
  /// What the scale is multiplied by after a step with inf/NaN gradients (which is skipped).
  ARC_ARG(double, backoff_factor) = 0.5;
  /// Clean steps before the scale grows.
  ARC_ARG(int64_t, growth_interval) = 2000;
};

/// Dynamic loss scaling for "16-mixed", as torch.amp.GradScaler: the loss is multiplied by the
/// scale before backward, the gradients divided by it before the step, and a step with inf/NaN
/// gradients is skipped while the scale backs off.
class GradScaler {
 public:
  /// A scaler with `options`.
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides `optimizer`'s gradients by the scale (once per step) and notes whether any is not finite.
  void unscale(torch::optim::Optimizer& optimizer);
  /// Unscales if not done yet, then steps unless a gradient was inf/NaN; returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);
  /// Ends the iteration: backs off after a skipped step, grows after growth_interval clean ones.
  void update();

  /// The loss scale now.
  double current_scale() const { return scale_; }
  /// Clean steps since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  /// The scale and growth tracker, for checkpoints; load_state_dict restores them.
  ///@{
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);
  ///@}

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  // Per optimizer in this iteration: unscaled yet, and whether an inf/NaN was found.
  std::map<const torch::optim::Optimizer*, bool> found_inf_;
};

}  // namespace arc
