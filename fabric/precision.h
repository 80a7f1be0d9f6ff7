// Precision: Lightning's precision plugins, chosen by name. "32-true" (default) and "64-true"
// compute in that float type; "bf16-mixed" runs steps under autocast to bfloat16 (CPU, CUDA);
// "16-mixed" autocasts to float16 on CUDA with a GradScaler (on the CPU it becomes "bf16-mixed",
// with a warning, as in Lightning); "bf16-true" / "16-true" cast the module and inputs.
#pragma once

#include <arc/data/batch.h>
#include <arc/fabric/grad_scaler.h>

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace arc {

class Strategy;

/// Lightning's precision plugins in one class: the module's type, autocast, the grad scaler of
/// "16-mixed", and gradient clipping, by precision name.
class Precision {
 public:
  /// Autocast on from construction to destruction (mixed precisions only); restores the state
  /// it found.
  class ForwardContext {
   public:
    /// Autocast to `dtype` on `device` (nothing when unset).
    ForwardContext(std::optional<torch::ScalarType> dtype, torch::DeviceType device);
    ~ForwardContext();
    ForwardContext(const ForwardContext&) = delete;
    ForwardContext& operator=(const ForwardContext&) = delete;

   private:
    bool active_;
    torch::DeviceType device_;
    bool was_enabled_ = false;
    torch::ScalarType was_dtype_ = torch::kFloat;
  };

  /// Resolves `name` for `device`; unknown names are an error listing the known ones. Gradient norms
  /// are taken by `strategy` (which must outlive this; null: LibTorch's clip_grad_norm_ alone).
  Precision(const std::string& name, torch::Device device, Strategy* strategy = nullptr);
  /// Every name the precision option takes: Lightning's names and aliases ("32-true", "32", ...).
  static const std::vector<std::string>& names();

  /// The resolved name ("16-mixed" on the CPU reads "bf16-mixed").
  const std::string& name() const { return name_; }
  /// The type modules and floating inputs take ("64-true", "bf16-true", "16-true").
  std::optional<torch::ScalarType> input_dtype() const { return true_dtype_; }
  /// Casts `module` to input_dtype() under the true precisions; leaves it as it is otherwise.
  void convert_module(torch::nn::Module& module) const;
  /// `batch` on this precision's device, floating tensors in input_dtype(): how the loops and
  /// arc::Fabric::prepare_batch move every batch.
  Batch to_device(const Batch& batch) const { return batch.to(device_, true_dtype_, /*non_blocking=*/true); }
  /// Wrap training/validation/test/predict steps in this.
  ForwardContext forward_context() const { return ForwardContext(autocast_dtype_, device_.type()); }

  /// The loss to call backward on (scaled under "16-mixed").
  torch::Tensor pre_backward(const torch::Tensor& loss) const;
  /// Before clipping: gradients back to their true size.
  void unscale(torch::optim::Optimizer& optimizer);
  /// Lightning's clip_gradients of its precision plugins: the gradients of `optimizer`'s parameters,
  /// unscaled first, have their total 2-norm clipped to `clip_val` ("norm", which returns the norm
  /// before clipping) or each value clipped into [-clip_val, clip_val] ("value"). 0 clips nothing.
  std::optional<double> clip_gradients(torch::optim::Optimizer& optimizer, double clip_val,
                                       const std::string& algorithm = "norm");
  /// Steps `optimizer`, unless the scaler found inf/NaN gradients; returns whether it stepped.
  bool optimizer_step(torch::optim::Optimizer& optimizer);
  /// After every optimizer of the iteration stepped.
  void update();

  /// The scaler's state (null without one), saved in checkpoints.
  ///@{
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);
  ///@}
  /// The grad scaler of "16-mixed" on a GPU, or null.
  const GradScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }

 private:
  std::string name_;
  torch::Device device_;
  std::optional<torch::ScalarType> true_dtype_;
  std::optional<torch::ScalarType> autocast_dtype_;
  std::optional<GradScaler> scaler_;
  Strategy* strategy_;
};

}  // namespace arc
