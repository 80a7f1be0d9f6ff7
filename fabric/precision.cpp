// Precision.
#include <arc/fabric/precision.h>

#include <arc/base/console.h>
#include <arc/base/detail/torch_compat.h>
#include <arc/base/error.h>
#include <arc/strategies/strategy.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>

namespace arc {
namespace {

// Every name the option takes, with the precision it means (Lightning's aliases included).
const std::vector<std::pair<std::string, std::string>> kNames = {
    {"32-true", "32-true"},       {"32", "32-true"},      {"64-true", "64-true"},   {"64", "64-true"},
    {"bf16-mixed", "bf16-mixed"}, {"bf16", "bf16-mixed"}, {"16-mixed", "16-mixed"}, {"16", "16-mixed"},
    {"bf16-true", "bf16-true"},   {"16-true", "16-true"}};

}  // namespace

Precision::ForwardContext::ForwardContext(std::optional<torch::ScalarType> dtype, torch::DeviceType device)
    : active_(dtype.has_value()), device_(device) {
  if (!active_) return;
  was_enabled_ = compat::autocast_enabled(device_);
  was_dtype_ = compat::autocast_dtype(device_);
  compat::set_autocast(device_, true, *dtype);
  at::autocast::increment_nesting();
}

Precision::ForwardContext::~ForwardContext() {
  if (!active_) return;
  // Casts cached for this step are dropped when the outermost context ends, as torch.autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(device_, was_enabled_, was_dtype_);
}

const std::vector<std::string>& Precision::names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, canonical] : kNames) out.push_back(name);
    return out;
  }();
  return names;
}

Precision::Precision(const std::string& name, torch::Device device, Strategy* strategy)
    : device_(device), strategy_(strategy) {
  const auto known = std::find_if(kNames.begin(), kNames.end(), [&](const auto& entry) { return entry.first == name; });
  if (known == kNames.end()) throw Error(unknown_name_message("precision", name, names()));
  name_ = known->second;
  if (name_ == "16-mixed" && !device.is_cuda()) {
    console().warn("precision '16-mixed' needs CUDA; using 'bf16-mixed' on {}, as Lightning does", device.str());
    name_ = "bf16-mixed";
  }
  if (name_ == "64-true") {
    true_dtype_ = torch::kDouble;
  } else if (name_ == "bf16-true") {
    true_dtype_ = torch::kBFloat16;
  } else if (name_ == "16-true") {
    true_dtype_ = torch::kHalf;
  } else if (name_ == "bf16-mixed") {
    autocast_dtype_ = torch::kBFloat16;
  } else if (name_ == "16-mixed") {
    autocast_dtype_ = torch::kHalf;
    // Each rank would find inf/NaN in its own gradients only, and the ranks' scales would part.
    ARC_CHECK(strategy == nullptr || !strategy->sharded(), "precision '16-mixed' scales the loss with a gradient ",
              "scaler, which strategy fsdp cannot share between ranks that hold different gradients; use ",
              "\"bf16-mixed\", or a strategy without sharding");
    scaler_.emplace();
  }
  if (autocast_dtype_)
    console().info("precision {}: autocast to {} on {}{}", name_, c10::toString(*autocast_dtype_), device.str(),
                   scaler_ ? ", with a gradient scaler" : "");
  if (true_dtype_) console().info("precision {}: module and inputs in {}", name_, c10::toString(*true_dtype_));
}

void Precision::convert_module(torch::nn::Module& module) const {
  if (true_dtype_) module.to(*true_dtype_);
}

torch::Tensor Precision::pre_backward(const torch::Tensor& loss) const { return scaler_ ? scaler_->scale(loss) : loss; }

void Precision::unscale(torch::optim::Optimizer& optimizer) {
  if (scaler_) scaler_->unscale(optimizer);
}

std::optional<double> Precision::clip_gradients(torch::optim::Optimizer& optimizer, double clip_val,
                                                const std::string& algorithm) {
  // One check for the Trainer's options and the Fabric's arguments, naming both.
  ARC_CHECK(algorithm == "norm" || algorithm == "value", "clip_gradients: the algorithm \"", algorithm,
            "\" (gradient_clip_algorithm, or Fabric::clip_gradients' algorithm) is unknown; use \"norm\" ",
            "(the total 2-norm) or \"value\" (each gradient value)");
  ARC_CHECK(clip_val >= 0, "clip_gradients: the clip value ", clip_val,
            " (gradient_clip_val, or Fabric::clip_gradients' clip_val) is negative; give a value >= 0 (0 or none ",
            "clips nothing)");
  if (clip_val == 0) return std::nullopt;
  unscale(optimizer);
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params())
      if (parameter.grad().defined() || strategy_ != nullptr) parameters.push_back(parameter);
  if (algorithm == "value") {
    torch::nn::utils::clip_grad_value_(parameters, clip_val);
    return std::nullopt;
  }
  // Every rank passes every parameter: sharded, some have their gradient on another rank.
  if (strategy_ != nullptr) return strategy_->clip_grad_norm(parameters, clip_val);
  return torch::nn::utils::clip_grad_norm_(parameters, clip_val, 2.0);
}

bool Precision::optimizer_step(torch::optim::Optimizer& optimizer) {
  if (scaler_) return scaler_->step(optimizer);
  optimizer.step();
  return true;
}

void Precision::update() {
  if (scaler_) scaler_->update();
}

nlohmann::json Precision::state_dict() const { return scaler_ ? scaler_->state_dict() : nlohmann::json(nullptr); }

void Precision::load_state_dict(const nlohmann::json& state) {
  if (scaler_ && !state.is_null()) scaler_->load_state_dict(state);
}

}  // namespace arc
