// GradScaler.
#include <arc/fabric/grad_scaler.h>

#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>

#include <torch/torch.h>

namespace arc {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale()) {
  ARC_CHECK(options_.init_scale() > 0 && options_.growth_factor() > 1 && options_.backoff_factor() > 0 &&
                options_.backoff_factor() < 1 && options_.growth_interval() > 0,
            "GradScaler needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval > 0; got ",
            options_.init_scale(), ", ", options_.growth_factor(), ", ", options_.backoff_factor(), " and ",
            options_.growth_interval());
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (found_inf_.count(&optimizer) > 0) return;
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  std::vector<torch::Tensor> finite;
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params()) {
      if (!parameter.grad().defined()) continue;
      auto& grad = parameter.mutable_grad();
      grad.mul_(inverse);
      finite.push_back(torch::isfinite(grad).all());
    }
  // One device sync for all gradients.
  found_inf_[&optimizer] = !finite.empty() && !torch::stack(finite).all().item<bool>();
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  unscale(optimizer);
  if (found_inf_.at(&optimizer)) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  bool found = false;
  for (const auto& [optimizer, inf] : found_inf_) found = found || inf;
  found_inf_.clear();
  if (found) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    growth_tracker_ = 0;
  }
}

nlohmann::json GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_factor", options_.growth_factor()},
          {"backoff_factor", options_.backoff_factor()},
          {"growth_interval", options_.growth_interval()},
          {"growth_tracker", growth_tracker_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  scale_ = state.at("scale").get<double>();
  options_.growth_factor(state.at("growth_factor").get<double>());
  options_.backoff_factor(state.at("backoff_factor").get<double>());
  options_.growth_interval(detail::json_integer(state.at("growth_interval"), "growth_interval", 1));
  growth_tracker_ = detail::json_integer(state.at("growth_tracker"), "growth_tracker");
}

}  // namespace arc
