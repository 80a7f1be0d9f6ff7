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

class GradScalerOptions {
  ARC_ARG(double, init_scale) = 65536.0;
  ARC_ARG(double, growth_factor) = 2.0;
  ARC_ARG(double, backoff_factor) = 0.5;
  ARC_ARG(int64_t, growth_interval) = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides `optimizer`'s gradients by the scale (once per step) and notes whether any is not finite.
  void unscale(torch::optim::Optimizer& optimizer);
  /// Unscales if not done yet, then steps unless a gradient was inf/NaN; returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);
  /// Ends the iteration: backs off after a skipped step, grows after growth_interval clean ones.
  void update();

  double current_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  // Per optimizer in this iteration: unscaled yet, and whether an inf/NaN was found.
  std::map<const torch::optim::Optimizer*, bool> found_inf_;
};

}  // namespace arc
