// ModelPruning: Lightning's callback that prunes weights with torch.nn.utils.prune's methods at the
// end of training epochs, optionally resetting the rest to their first values (lottery tickets).
#pragma once

#include <arc/base/arg.h>
#include <arc/core/callback.h>

#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// How much one pruning removes, as Lightning's `amount`.
struct PruningAmount {
  /// Lightning's float: this fraction (0 to 1) of the weights (or channels) not pruned yet.
  static PruningAmount fraction(double value) { return {value, false}; }
  /// Lightning's int: this many of them.
  static PruningAmount count(int64_t value) { return {static_cast<double>(value), true}; }

  /// The fraction or the count.
  double value = 0.5;
  /// Whether `value` is a count.
  bool is_count = false;
};

/// (submodule, parameter) names.
using ParameterNames = std::vector<std::pair<std::string, std::string>>;

/// ModelPruning's settings (Lightning's names and defaults; pruning_fn, which Lightning requires,
/// defaults to "l1_unstructured").
struct ModelPruningOptions {
  /// torch.nn.utils.prune's methods: "l1_unstructured" (the smallest magnitudes), "random_unstructured",
  /// "ln_structured" (the channels along pruning_dim with the smallest pruning_norm-norm) or
  /// "random_structured".
  ARC_ARG(std::string, pruning_fn) = "l1_unstructured";
  /// (submodule as named_modules() names it, "" for the module itself; parameter) pairs. Empty: every
  /// parameter of parameter_names in every submodule but containers (Sequential, ModuleList, ModuleDict).
  ARC_ARG(ParameterNames, parameters_to_prune);
  /// The parameters pruned in every submodule when parameters_to_prune is empty: "weight", "bias".
  ARC_ARG(std::vector<std::string>, parameter_names) = std::vector<std::string>{"weight", "bias"};
  /// One ranking across all the parameters (unstructured methods only), or each parameter alone.
  ARC_ARG(bool, use_global_unstructured) = true;
  /// Given the epoch: how much the pruning at its end removes (nothing: no pruning).
  ARC_ARG(std::function<PruningAmount(int64_t)>, amount) = [](int64_t) { return PruningAmount(); };
  /// Given the epoch: whether it ends with a pruning.
  ARC_ARG(std::function<bool(int64_t)>, apply_pruning) = [](int64_t) { return true; };
  /// At train end, stop holding the pruned weights at zero (they are zero then; a later fit with this
  /// callback starts from new masks). Off: the masks stay for the next fit.
  ARC_ARG(bool, make_pruning_permanent) = true;
  /// Given the epoch: whether after its pruning the weights left are reset to their values at fit
  /// start (the lottery ticket hypothesis).
  ARC_ARG(std::function<bool(int64_t)>, use_lottery_ticket_hypothesis) = [](int64_t) { return true; };
  /// With lottery tickets: reset to newly drawn values (the layer's reset_parameters: Linear and
  /// Conv layers) instead of the first ones.
  ARC_ARG(bool, resample_parameters) = false;
  /// Structured methods: the dimension whose slices (channels) are pruned.
  ARC_ARG(std::optional<int64_t>, pruning_dim);
  /// ln_structured: the norm's order (2: Euclidean; infinity allowed).
  ARC_ARG(std::optional<double>, pruning_norm);
  /// 0: quiet; 1: the overall sparsity after each pruning; 2: and each parameter's.
  ARC_ARG(int64_t, verbose) = 0;
  /// Prune at each training epoch's end, or else at each validation's end (sanity check aside).
  ARC_ARG(bool, prune_on_train_epoch_end) = true;
};

/// Lightning's ModelPruning: torch.nn.utils.prune's masks, computed as PyTorch computes them (each
/// pruning removes its amount from the weights still unpruned; Python's rounding of fractions;
/// random methods draw from LibTorch's generator), and
/// kept: the pruned weights' gradients are zeroed before every optimizer step (before clipping, so
/// norms are PyTorch's) and the weights after it, so that every forward sees what PyTorch's masked
/// reparametrization gives. Under DDP rank 0's masks go to every rank. Checkpoints hold the pruned
/// weights, as Lightning's do with make_pruning_permanent, and also the masks and first values under
/// the callback, so that a resumed fit keeps pruning exactly (Lightning's loses its masks there); a
/// checkpoint without them resumes with a warning, pruning afresh.
class ModelPruning : public Callback {
 public:
  /// Prunes as `options` say; options it cannot run with are errors.
  explicit ModelPruning(ModelPruningOptions options = {});
  std::string state_key() const override { return "ModelPruning"; }

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_before_optimizer_step(Trainer& trainer, TrainModule& module, torch::optim::Optimizer& optimizer) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override { return {{"pruned_epoch", pruned_epoch_}}; }
  void load_state_dict(const nlohmann::json& state) override {
    pruned_epoch_ = state.at("pruned_epoch").get<int64_t>();
  }
  void on_save_checkpoint(Trainer& trainer, TrainModule& module, CheckpointWriter& writer) override;
  void on_load_checkpoint(Trainer& trainer, TrainModule& module, const CheckpointReader& reader) override;

  /// Prunes now by `amount` (what the epoch ends run).
  void apply_pruning(Trainer& trainer, PruningAmount amount);
  /// The pruned parameters' qualified names and masks (1 kept, 0 pruned); none before a pruning.
  std::vector<std::pair<std::string, torch::Tensor>> masks() const;

 private:
  struct Target {
    std::string name;  // qualified: "fc1.weight"
    torch::nn::Module* owner;
    torch::Tensor parameter;
    torch::Tensor mask;      // undefined: not pruned yet
    torch::Tensor original;  // the value at fit start, for lottery tickets
  };

  void run_pruning(Trainer& trainer, int64_t epoch);
  /// Each target's new mask: `amount` more of its unpruned entries (or channels) set to 0.
  std::vector<torch::Tensor> new_masks(PruningAmount amount) const;
  void reset_to_first_values();
  /// Holds the pruned weights at zero.
  void apply_masks();

  ModelPruningOptions options_;
  std::vector<Target> targets_;
  bool restored_ = false;
  /// The last epoch whose training end pruned: a fit resumed from a checkpoint of that end runs
  /// the end again, and must not prune twice.
  int64_t pruned_epoch_ = -1;
  /// The global step after which the weights were last masked.
  int64_t masked_step_ = -1;
};

}  // namespace arc
