// Precision.
#include <arc/core/precision.h>

#include <arc/core/console.h>
#include <arc/core/error.h>
#include <arc/core/torch_compat.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace arc {

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

Precision::Precision(const std::string& name, torch::Device device) : name_(name), device_(device) {
  if (name_ == "32") name_ = "32-true";
  if (name_ == "64") name_ = "64-true";
  if (name_ == "16") name_ = "16-mixed";
  if (name_ == "bf16") name_ = "bf16-mixed";
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
    scaler_.emplace();
  } else {
    ARC_CHECK(name_ == "32-true", "unknown precision '", name, "'; use one of 32-true, 64-true, bf16-mixed, ",
              "16-mixed, bf16-true, 16-true");
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
