// BaseFinetuning and BackboneFinetuning: Lightning's callbacks that freeze parts of a module before
// fit and unfreeze them later into new parameter groups of the optimizer. Unlike Lightning's, a
// resumed fit trains what was unfrozen before the interruption (the frozen set is in checkpoints),
// and under DDP the unfrozen parameters' gradients are averaged (the reducer follows which
// parameters require gradients).
#pragma once

#include <arc/base/arg.h>
#include <arc/core/callback.h>

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

struct BatchNormLayer;

/// Subclass it: freeze_before_training freezes (at fit's setup, before configure_optimizers, which
/// must then give the optimizer only the parameters that require gradients), and finetune_function
/// unfreezes at the epochs it chooses, with unfreeze_and_add_param_group. The parameter groups it
/// added and what is frozen are saved in checkpoints under state_key() and put back on resume.
class BaseFinetuning : public Callback {
 public:
  /// Freezes what is to be finetuned later (freeze(...)).
  virtual void freeze_before_training(TrainModule& module) = 0;
  /// At every training epoch's start, once per optimizer: unfreezes when it is time.
  virtual void finetune_function(TrainModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) = 0;

  /// Leaf modules and modules with parameters of their own, as Lightning's flatten_modules.
  static std::vector<torch::nn::Module*> flatten_modules(torch::nn::Module& module);
  /// The parameters of `module` whose requires_grad is `requires_grad`, BatchNorm layers' left out
  /// unless `train_bn`.
  static std::vector<torch::Tensor> filter_params(torch::nn::Module& module, bool train_bn = true,
                                                  bool requires_grad = true);
  /// `parameters` that `optimizer` does not hold yet.
  static std::vector<torch::Tensor> filter_on_optimizer(const torch::optim::Optimizer& optimizer,
                                                        const std::vector<torch::Tensor>& parameters);
  /// No parameter of `module` requires gradients; BatchNorm layers keep training unless `train_bn`
  /// is false, when they normalize as Lightning's frozen ones (batch statistics in training, the
  /// running ones untouched).
  void freeze(torch::nn::Module& module, bool train_bn = true);
  /// Every parameter of `module` requires gradients, and frozen BatchNorm layers update their
  /// running statistics again.
  void make_trainable(torch::nn::Module& module);
  /// make_trainable, then `module`'s parameters that `optimizer` lacks join it as a new group with
  /// learning rate `lr` (default: the first group's divided by `initial_denom_lr`).
  void unfreeze_and_add_param_group(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                    std::optional<double> lr = std::nullopt, double initial_denom_lr = 10.0,
                                    bool train_bn = true);

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  void on_load_checkpoint(Trainer& trainer, TrainModule& module, const CheckpointReader& reader) override;

 protected:
  /// Whether unfreeze_and_add_param_group added a group to `optimizer` in this fit (or in the one
  /// it resumes): its last group is then the one added last.
  bool added_group_to(const torch::optim::Optimizer& optimizer) const;

 private:
  /// A BatchNorm layer frozen with train_bn false: what it had before.
  struct FrozenNorm {
    std::optional<double> momentum;
    int64_t batches_tracked = 0;
  };
  void freeze_norm(torch::nn::Module& module, const BatchNormLayer& norm);
  void thaw_norm(torch::nn::Module& module, const BatchNormLayer& norm);
  /// The index of `optimizer` among the Trainer's (nullopt: not one of them, or no fit).
  std::optional<size_t> trainer_index(const torch::optim::Optimizer& optimizer) const;

  /// Adds a group of `names` (of module_'s parameters) to `optimizer`, the trainer's `index`-th.
  void add_group(torch::optim::Optimizer& optimizer, size_t index, const std::vector<std::string>& names);

  TrainModule* module_ = nullptr;  // the module of the last fit
  std::map<torch::nn::Module*, FrozenNorm> frozen_norms_;
  /// Per optimizer, the groups this callback added, each as its parameters' names.
  std::vector<std::vector<std::vector<std::string>>> added_groups_;
  /// The last epoch whose start called finetune_function (a resumed epoch's start does not again).
  int64_t finetuned_epoch_ = -1;
  nlohmann::json restored_;  // the checkpoint's state until on_load_checkpoint applies it
};

/// BackboneFinetuning's settings (Lightning's names and defaults).
struct BackboneFinetuningOptions {
  /// The epoch at whose start the backbone joins the optimizer.
  ARC_ARG(int64_t, unfreeze_backbone_at_epoch) = 10;
  /// The backbone's rate at each later epoch e is lambda_func(e + 1) times the one before.
  ARC_ARG(std::function<double(int64_t)>, lambda_func) = [](int64_t) { return 2.0; };
  /// The backbone's first rate: the first group's times this, unless backbone_initial_lr is set.
  ARC_ARG(double, backbone_initial_ratio_lr) = 0.1;
  /// The backbone's first rate itself (unset: by backbone_initial_ratio_lr).
  ARC_ARG(std::optional<double>, backbone_initial_lr);
  /// The backbone's rate stops at the first group's once it reaches it.
  ARC_ARG(bool, should_align) = true;
  /// Passed on to unfreeze_and_add_param_group, as Lightning's; the backbone's first rate is always
  /// given there, so it changes nothing (nor does Lightning's).
  ARC_ARG(double, initial_denom_lr) = 10.0;
  /// The backbone's BatchNorm layers keep training while it is frozen; false freezes them too.
  ARC_ARG(bool, train_bn) = true;
  /// Says both rates at each epoch from the unfreezing on, rounded to `rounding` decimals.
  ARC_ARG(bool, verbose) = false;
  /// Decimals of the rates that verbose says.
  ARC_ARG(int64_t, rounding) = 12;
  /// The module's submodule that is the backbone (Lightning's `backbone` attribute); a dotted path
  /// names a deeper one.
  ARC_ARG(std::string, backbone) = "backbone";
};

/// Lightning's BackboneFinetuning: the backbone is frozen until unfreeze_backbone_at_epoch, then
/// trained with a rate that grows by lambda_func each epoch up to the rest's.
class BackboneFinetuning : public BaseFinetuning {
 public:
  /// Finetunes as `options` say; an impossible value is an error.
  explicit BackboneFinetuning(BackboneFinetuningOptions options = {});
  std::string state_key() const override { return "BackboneFinetuning"; }
  void freeze_before_training(TrainModule& module) override;
  void finetune_function(TrainModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  torch::nn::Module& backbone(TrainModule& module) const;

  BackboneFinetuningOptions options_;
  std::optional<double> previous_backbone_lr_;
};

}  // namespace arc
