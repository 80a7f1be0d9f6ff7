// BaseFinetuning and BackboneFinetuning.
#include <arc/callbacks/finetuning.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>
#include <arc/strategies/sync_batch_norm.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace arc {
namespace {

// A BatchNorm layer's momentum (unset: a cumulative average), in and out of LibTorch's optional.
std::optional<double> momentum_of(const torch::nn::BatchNormOptions& options) {
  const auto momentum = options.momentum();
  return momentum ? std::optional<double>(*momentum) : std::nullopt;
}
void set_momentum(torch::nn::BatchNormOptions& options, std::optional<double> momentum) {
  options.momentum(momentum ? c10::optional<double>(*momentum) : c10::nullopt);
}

// Each parameter's name in `module`, by the parameter's storage.
std::map<const void*, std::string> parameter_names(torch::nn::Module& module) {
  std::map<const void*, std::string> names;
  for (const auto& item : module.named_parameters()) names[item.value().unsafeGetTensorImpl()] = item.key();
  return names;
}

}  // namespace

std::vector<torch::nn::Module*> BaseFinetuning::flatten_modules(torch::nn::Module& module) {
  std::vector<torch::nn::Module*> out;
  const auto keep = [&](torch::nn::Module& m) {
    if (m.children().empty() || !m.named_parameters(/*recurse=*/false).is_empty()) out.push_back(&m);
  };
  keep(module);
  for (const auto& child : module.modules(/*include_self=*/false)) keep(*child);
  return out;
}

std::vector<torch::Tensor> BaseFinetuning::filter_params(torch::nn::Module& module, bool train_bn, bool requires_grad) {
  std::vector<torch::Tensor> out;
  for (auto* m : flatten_modules(module)) {
    if (!train_bn && batch_norm_of(*m)) continue;
    for (const auto& parameter : m->parameters(/*recurse=*/false))
      if (parameter.requires_grad() == requires_grad) out.push_back(parameter);
  }
  return out;
}

std::vector<torch::Tensor> BaseFinetuning::filter_on_optimizer(const torch::optim::Optimizer& optimizer,
                                                               const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> out;
  for (const auto& parameter : parameters) {
    bool held = false;
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params()) held = held || p.is_same(parameter);
    if (!held) out.push_back(parameter);
  }
  return out;
}

void BaseFinetuning::freeze_norm(torch::nn::Module& module, const BatchNormLayer& norm) {
  const auto& tracked = norm.num_batches_tracked;
  if (frozen_norms_.count(&module) == 0)
    frozen_norms_[&module] = FrozenNorm{momentum_of(*norm.options), tracked.defined() ? tracked.item<int64_t>() : 0};
  // Momentum 0 keeps the running statistics; training still normalizes by the batch's.
  norm.options->momentum(0.0);
}

void BaseFinetuning::thaw_norm(torch::nn::Module& module, const BatchNormLayer& norm) {
  const auto found = frozen_norms_.find(&module);
  if (found == frozen_norms_.end()) return;
  set_momentum(*norm.options, found->second.momentum);
  if (norm.num_batches_tracked.defined()) norm.num_batches_tracked.fill_(found->second.batches_tracked);
  frozen_norms_.erase(found);
}

void BaseFinetuning::freeze(torch::nn::Module& module, bool train_bn) {
  torch::NoGradGuard no_grad;
  for (auto* m : flatten_modules(module)) {
    const auto norm = batch_norm_of(*m);
    if (norm && train_bn) {
      make_trainable(*m);
      continue;
    }
    if (norm) freeze_norm(*m, *norm);
    for (auto& parameter : m->parameters(/*recurse=*/false)) parameter.set_requires_grad(false);
  }
}

void BaseFinetuning::make_trainable(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto* m : flatten_modules(module)) {
    if (const auto norm = batch_norm_of(*m)) thaw_norm(*m, *norm);
    for (auto& parameter : m->parameters(/*recurse=*/false)) parameter.set_requires_grad(true);
  }
}

void BaseFinetuning::unfreeze_and_add_param_group(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                                  std::optional<double> lr, double initial_denom_lr, bool train_bn) {
  // Frozen parameters that the optimizer holds already were given to it by mistake.
  const auto frozen = filter_params(module, train_bn, false);
  if (const auto held = frozen.size() - filter_on_optimizer(optimizer, frozen).size(); held > 0)
    console().warn(
        "{}: {} frozen parameters to unfreeze are in the optimizer already and stay in their group; give "
        "the optimizer only the parameters that require gradients in configure_optimizers, e.g. "
        "BaseFinetuning::filter_params(*this)",
        state_key(), held);
  make_trainable(module);
  const auto parameters = filter_on_optimizer(optimizer, filter_params(module, train_bn, true));
  if (parameters.empty()) return;
  const double rate = lr ? *lr : optimizer.param_groups().front().options().get_lr() / initial_denom_lr;
  optimizer.add_param_group(torch::optim::OptimizerParamGroup(parameters));
  optimizer.param_groups().back().options().set_lr(rate);
  // Recorded by name for checkpoints, when the optimizer is the Trainer's.
  const auto index = trainer_index(optimizer);
  if (!index) return;
  const auto names = parameter_names(*module_);
  std::vector<std::string> group;
  for (const auto& parameter : parameters) {
    const auto name = names.find(parameter.unsafeGetTensorImpl());
    ARC_CHECK(name != names.end(), state_key(), ": a parameter to unfreeze is not one of ", module_->name(),
              "'s; unfreeze submodules of the module being fit");
    group.push_back(name->second);
  }
  added_groups_.resize(std::max(added_groups_.size(), *index + 1));
  added_groups_[*index].push_back(group);
}

std::optional<size_t> BaseFinetuning::trainer_index(const torch::optim::Optimizer& optimizer) const {
  if (module_ == nullptr || !module_->attached()) return std::nullopt;
  const auto& configs = module_->trainer().optimizer_configs();
  for (size_t i = 0; i < configs.size(); ++i)
    if (configs[i].optimizer.get() == &optimizer) return i;
  return std::nullopt;
}

bool BaseFinetuning::added_group_to(const torch::optim::Optimizer& optimizer) const {
  const auto index = trainer_index(optimizer);
  return index && *index < added_groups_.size() && !added_groups_[*index].empty();
}

void BaseFinetuning::setup(Trainer&, TrainModule& module, Stage stage) {
  if (stage != Stage::fit) return;
  if (module_ != &module) frozen_norms_.clear();  // another module's layers
  module_ = &module;
  added_groups_.clear();
  finetuned_epoch_ = -1;
  restored_ = nullptr;
  freeze_before_training(module);
}

void BaseFinetuning::on_train_epoch_start(Trainer& trainer, TrainModule& module) {
  // A resumed epoch's start already came before the interruption.
  if (trainer.current_epoch() <= finetuned_epoch_) return;
  finetuned_epoch_ = trainer.current_epoch();
  for (const auto& config : trainer.optimizer_configs())
    finetune_function(module, trainer.current_epoch(), *config.optimizer);
}

nlohmann::json BaseFinetuning::state_dict() const {
  if (module_ == nullptr) return nullptr;
  nlohmann::json frozen = nlohmann::json::array(), norms = nlohmann::json::object();
  for (const auto& item : module_->named_parameters())
    if (!item.value().requires_grad()) frozen.push_back(item.key());
  for (const auto& item : module_->named_modules("", /*include_self=*/false)) {
    const auto found = frozen_norms_.find(item.value().get());
    if (found == frozen_norms_.end()) continue;
    const auto& [momentum, tracked] = found->second;
    norms[item.key()] = {{"momentum", momentum ? nlohmann::json(*momentum) : nlohmann::json(nullptr)},
                         {"batches_tracked", tracked}};
  }
  return {{"added_groups", added_groups_},
          {"frozen", frozen},
          {"frozen_norms", norms},
          {"finetuned_epoch", finetuned_epoch_}};
}

void BaseFinetuning::load_state_dict(const nlohmann::json& state) { restored_ = state; }

void BaseFinetuning::add_group(torch::optim::Optimizer& optimizer, size_t index,
                               const std::vector<std::string>& names) {
  const auto named = module_->named_parameters();
  std::vector<torch::Tensor> parameters;
  for (const auto& name : names) {
    const auto* parameter = named.find(name);
    ARC_CHECK(parameter != nullptr, "the checkpoint's ", state_key(), " state adds parameter '", name,
              "' to optimizer ", index, ", but ", module_->name(), " has none of that name; resume with the ",
              "module that was trained, or without the checkpoint");
    parameters.push_back(*parameter);
  }
  optimizer.add_param_group(torch::optim::OptimizerParamGroup(parameters));
}

// setup froze as before training; the checkpoint says what was frozen and added when it was saved.
void BaseFinetuning::on_load_checkpoint(Trainer& trainer, TrainModule& module, const CheckpointReader&) {
  if (restored_.is_null()) return;
  module_ = &module;
  const auto state = std::move(restored_);
  restored_ = nullptr;
  finetuned_epoch_ = state.at("finetuned_epoch").get<int64_t>();
  const auto frozen = state.at("frozen").get<std::set<std::string>>();
  for (auto& item : module.named_parameters()) item.value().set_requires_grad(frozen.count(item.key()) == 0);
  const auto& norms = state.at("frozen_norms");
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* layer = item.value().get();
    const auto norm = batch_norm_of(*layer);
    if (!norm) continue;
    if (const auto saved = norms.find(item.key()); saved != norms.end()) {
      const auto& momentum = saved->at("momentum");
      frozen_norms_[layer] =
          FrozenNorm{momentum.is_null() ? std::nullopt : std::optional<double>(momentum.get<double>()),
                     saved->at("batches_tracked").get<int64_t>()};
      norm->options->momentum(0.0);
    } else if (const auto found = frozen_norms_.find(layer); found != frozen_norms_.end()) {
      // Unfrozen before the save: its momentum comes back, its statistics are the checkpoint's.
      set_momentum(*norm->options, found->second.momentum);
      frozen_norms_.erase(found);
    }
  }
  added_groups_ = state.at("added_groups").get<std::vector<std::vector<std::vector<std::string>>>>();
  const auto& configs = trainer.optimizer_configs();
  ARC_CHECK(added_groups_.size() <= configs.size(), "the checkpoint's ", state_key(),
            " state adds parameter groups to ", added_groups_.size(),
            " optimizers, but configure_optimizers() returns ", configs.size(),
            "; resume with the configure_optimizers() that was trained");
  for (size_t i = 0; i < added_groups_.size(); ++i)
    for (const auto& group : added_groups_[i]) add_group(*configs[i].optimizer, i, group);
}

BackboneFinetuning::BackboneFinetuning(BackboneFinetuningOptions options) : options_(std::move(options)) {
  ARC_CHECK(options_.unfreeze_backbone_at_epoch() >= 0, "BackboneFinetuning: unfreeze_backbone_at_epoch is ",
            options_.unfreeze_backbone_at_epoch(), "; give an epoch, 0 or more");
  ARC_CHECK(static_cast<bool>(options_.lambda_func()), "BackboneFinetuning: lambda_func is empty; give a function ",
            "of the epoch, e.g. [](int64_t) { return 1.5; }");
  ARC_CHECK(options_.initial_denom_lr() > 0, "BackboneFinetuning: initial_denom_lr is ", options_.initial_denom_lr(),
            "; give a positive number, e.g. 10");
  ARC_CHECK(options_.rounding() >= 0, "BackboneFinetuning: rounding is ", options_.rounding(),
            "; give a number of decimals, 0 or more");
}

torch::nn::Module& BackboneFinetuning::backbone(TrainModule& module) const {
  const auto& name = options_.backbone();
  const auto named = module.named_modules("", /*include_self=*/false);
  const auto* found = named.find(name);
  ARC_CHECK(found != nullptr, "BackboneFinetuning: ", module.name(), " has no submodule '", name,
            "'; register the part to finetune as register_module(\"", name,
            "\", ...), or name yours with BackboneFinetuningOptions::backbone (\"backbone\" in a config)");
  return **found;
}

void BackboneFinetuning::freeze_before_training(TrainModule& module) {
  previous_backbone_lr_.reset();  // a resume loads it after this
  freeze(backbone(module), options_.train_bn());
}

void BackboneFinetuning::finetune_function(TrainModule& module, int64_t epoch, torch::optim::Optimizer& optimizer) {
  const int64_t at = options_.unfreeze_backbone_at_epoch();
  if (epoch < at) return;
  const double current = optimizer.param_groups().front().options().get_lr();
  double backbone_lr = 0;
  if (epoch == at) {
    backbone_lr = options_.backbone_initial_lr().value_or(current * options_.backbone_initial_ratio_lr());
    unfreeze_and_add_param_group(backbone(module), optimizer, backbone_lr, options_.initial_denom_lr(),
                                 options_.train_bn());
  } else {
    // The backbone was in the optimizer already (a warning said so): its group is not ours to set.
    if (!added_group_to(optimizer)) return;
    ARC_CHECK(previous_backbone_lr_.has_value(), "BackboneFinetuning: epoch ", epoch,
              " is after the backbone's unfreezing at epoch ", at,
              ", which this fit did not go through; resume from a checkpoint of the run that did, or start afresh");
    backbone_lr = options_.lambda_func()(epoch + 1) * *previous_backbone_lr_;
    if (options_.should_align() && backbone_lr > current) backbone_lr = current;
    optimizer.param_groups().back().options().set_lr(backbone_lr);
  }
  previous_backbone_lr_ = backbone_lr;
  if (options_.verbose()) {
    const double scale = std::pow(10.0, static_cast<double>(options_.rounding()));
    console().info("Current lr: {}, Backbone lr: {}", std::round(current * scale) / scale,
                   std::round(backbone_lr * scale) / scale);
  }
}

nlohmann::json BackboneFinetuning::state_dict() const {
  auto state = BaseFinetuning::state_dict();
  if (state.is_null()) return state;
  state["previous_backbone_lr"] = previous_backbone_lr_ ? nlohmann::json(*previous_backbone_lr_) : nullptr;
  return state;
}

void BackboneFinetuning::load_state_dict(const nlohmann::json& state) {
  const auto& previous = state.at("previous_backbone_lr");
  previous_backbone_lr_ = previous.is_null() ? std::nullopt : std::optional<double>(previous.get<double>());
  BaseFinetuning::load_state_dict(state);
}

}  // namespace arc
