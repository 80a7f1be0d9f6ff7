// ModelPruning.
#include <arc/callbacks/model_pruning.h>

#include <arc/strategies/sharded_unit.h>

#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>
#include <arc/fabric/checkpoint.h>
#include <arc/strategies/collectives.h>
#include <arc/strategies/strategy.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace arc {
namespace {

const std::set<std::string> kMethods = {"l1_unstructured", "random_unstructured", "ln_structured", "random_structured"};

bool structured(const std::string& method) { return method == "ln_structured" || method == "random_structured"; }

// `flat` cut into tensors shaped as `like`, in order.
std::vector<torch::Tensor> split_like(const torch::Tensor& flat, const std::vector<torch::Tensor>& like) {
  std::vector<int64_t> sizes;
  for (const auto& tensor : like) sizes.push_back(tensor.numel());
  std::vector<torch::Tensor> out;
  const auto parts = flat.split_with_sizes(sizes);
  for (size_t i = 0; i < like.size(); ++i) out.push_back(parts[i].view_as(like[i]).clone());
  return out;
}

// PyTorch's _compute_nparams_toprune and _validate_pruning_amount: a count as it is, a fraction
// rounded as Python's round() (halves to even).
int64_t to_prune(PruningAmount amount, int64_t size, const std::string& what) {
  ARC_CHECK(amount.value >= 0, "ModelPruning: amount is ", amount.value, "; give a count or a fraction of 0 or more");
  if (amount.is_count) {
    ARC_CHECK(amount.value <= static_cast<double>(size), "ModelPruning: amount ", amount.value, " is more than the ",
              size, " unpruned entries of ", what, "; prune fewer, or give a fraction");
    return static_cast<int64_t>(amount.value);
  }
  ARC_CHECK(amount.value <= 1, "ModelPruning: amount ", amount.value,
            " is a fraction and must be in [0, 1]; give a count as an integer");
  return static_cast<int64_t>(std::nearbyint(amount.value * static_cast<double>(size)));
}

// Unstructured: `amount` more of the entries where the flat `mask` is 1 set to 0, those with the
// smallest |score| (l1) or at random (PyTorch's topk of uniform draws).
torch::Tensor unstructured_mask(const torch::Tensor& scores, const torch::Tensor& mask, PruningAmount amount,
                                bool random, const std::string& what) {
  auto out = mask.clone();
  const auto remaining = torch::nonzero(mask == 1).flatten();
  const int64_t k = to_prune(amount, remaining.numel(), what);
  if (k == 0) return out;
  const auto t = scores.index_select(0, remaining);
  const auto chosen = std::get<1>(random ? torch::topk(torch::rand_like(t), k)
                                         : torch::topk(t.abs(), k, /*dim=*/-1, /*largest=*/false));
  out.index_put_({remaining.index_select(0, chosen)}, 0);
  return out;
}

// Structured: `amount` more of the slices along `dim` that still hold a kept entry set to 0, those
// with the smallest `norm`-norm (ln_structured) or at random (random_structured), as PyTorch's.
// `dim` is one of the weight's (checked at setup).
torch::Tensor structured_mask(const torch::Tensor& weight, const torch::Tensor& mask, int64_t dim, bool random,
                              double norm, PruningAmount amount, const std::string& what) {
  const int64_t dims = weight.dim();
  if (dim < 0) dim += dims;
  std::vector<int64_t> others;
  for (int64_t d = 0; d < dims; ++d)
    if (d != dim) others.push_back(d);
  const auto kept = torch::nonzero(mask.sum(others) != 0).flatten();
  const auto t = weight.index_select(dim, kept);
  const int64_t channels = kept.numel();
  const int64_t k = to_prune(amount, channels, what);
  if (k == 0) return mask.clone();
  torch::Tensor keep;
  if (random) {
    const auto prob = torch::rand({channels});
    keep = torch::nonzero(prob > std::get<0>(torch::kthvalue(prob, k))).flatten();
  } else {
    keep = std::get<1>(torch::topk(torch::norm(t, norm, others), channels - k, /*dim=*/-1, /*largest=*/true));
  }
  auto partial = torch::zeros_like(t).index_fill_(dim, keep, 1) * mask.index_select(dim, kept);
  return mask.clone().index_copy_(dim, kept, partial);
}

bool container(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
}

// The layer's parameters drawn anew (reset_parameters of a copy), for resample_parameters.
std::shared_ptr<torch::nn::Module> resampled(const torch::nn::Module& layer, const std::string& name) {
  // An arc::ShardedUnit holds its layer's parameters under their names: the layer draws them.
  const auto* unit = dynamic_cast<const ShardedUnitBase*>(&layer);
  auto copy = (unit != nullptr ? unit->wrapped() : layer).clone();
  if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(copy.get())) {
    linear->reset_parameters();
  } else if (auto* conv1 = dynamic_cast<torch::nn::Conv1dImpl*>(copy.get())) {
    conv1->reset_parameters();
  } else if (auto* conv2 = dynamic_cast<torch::nn::Conv2dImpl*>(copy.get())) {
    conv2->reset_parameters();
  } else if (auto* conv3 = dynamic_cast<torch::nn::Conv3dImpl*>(copy.get())) {
    conv3->reset_parameters();
  } else {
    ARC_FAIL("ModelPruning: resample_parameters draws new values with a layer's reset_parameters, which Arclight ",
             "calls for Linear and Conv layers, and ", name, " is in another; set resample_parameters to false");
  }
  return copy;
}

double sparsity(int64_t zeros, int64_t total) { return total == 0 ? 0.0 : 100.0 * zeros / total; }

}  // namespace

ModelPruning::ModelPruning(ModelPruningOptions options) : options_(std::move(options)) {
  auto& method = options_.pruning_fn();
  method = lowercase(method);  // as Lightning's
  ARC_CHECK(kMethods.count(method) > 0, "ModelPruning: pruning_fn \"", method,
            "\" is not one of torch.nn.utils.prune's: l1_unstructured, random_unstructured, ln_structured, ",
            "random_structured");
  for (const auto& name : options_.parameter_names())
    ARC_CHECK(name == "weight" || name == "bias", "ModelPruning: parameter_names holds \"", name,
              "\"; Lightning's are \"weight\" and \"bias\" (name others in parameters_to_prune)");
  if (structured(method)) {
    ARC_CHECK(options_.pruning_dim().has_value(), "ModelPruning: ", method,
              " prunes slices along a dimension; set pruning_dim (0: output channels)");
    ARC_CHECK(method != "ln_structured" || options_.pruning_norm().has_value(),
              "ModelPruning: ln_structured ranks slices by a norm; set pruning_norm (e.g. 1 or 2)");
    ARC_CHECK(!options_.use_global_unstructured(), "ModelPruning: use_global_unstructured ranks single weights ",
              "across parameters, and ", method, " prunes slices; set use_global_unstructured to false");
  }
  ARC_CHECK(options_.verbose() >= 0 && options_.verbose() <= 2, "ModelPruning: verbose is ", options_.verbose(),
            "; give 0, 1 or 2");
  ARC_CHECK(options_.amount() && options_.apply_pruning() && options_.use_lottery_ticket_hypothesis(),
            "ModelPruning: amount, apply_pruning and use_lottery_ticket_hypothesis must be functions of the epoch");
}

void ModelPruning::setup(Trainer&, TrainModule& module, Stage stage) {
  if (stage != Stage::fit) return;
  // Masks kept from an earlier fit of this module (make_pruning_permanent off) stay.
  if (!targets_.empty() && targets_.front().mask.defined()) {
    const auto parameters = module.named_parameters();
    const auto* found = parameters.find(targets_.front().name);
    if (found != nullptr && found->is_same(targets_.front().parameter)) return;
  }
  targets_.clear();
  // The module itself too, without named_modules' self (which needs the module in a shared_ptr).
  std::vector<std::pair<std::string, torch::nn::Module*>> modules{{"", &module}};
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    modules.emplace_back(item.key(), item.value().get());
  const auto add = [&](const std::string& path, torch::nn::Module* owner, const std::string& name) {
    const auto parameters = owner->named_parameters(/*recurse=*/false);  // find points into it
    const auto* parameter = parameters.find(name);
    if (parameter == nullptr) return false;
    targets_.push_back({path.empty() ? name : path + "." + name, owner, *parameter, {}, {}});
    return true;
  };
  if (options_.parameters_to_prune().empty()) {
    // Lightning's order: every weight, then every bias.
    for (const auto& name : options_.parameter_names())
      for (const auto& [path, owner] : modules)
        if (!container(*owner)) add(path, owner, name);
  } else {
    for (const auto& [path, name] : options_.parameters_to_prune()) {
      // A reference of its own for the lambda: C++17 cannot capture a structured binding (clang holds to it).
      const std::string& wanted = path;
      const auto owner = std::find_if(modules.begin(), modules.end(), [&](const auto& m) { return m.first == wanted; });
      ARC_CHECK(owner != modules.end() && add(path, owner->second, name), "ModelPruning: parameters_to_prune names (\"",
                path, "\", \"", name, "\"), which ", module.name(), " does not have; name a submodule as ",
                "named_modules() does (\"fc1\", \"\" for the module itself) and one of its own parameters");
    }
  }
  ARC_CHECK(!targets_.empty(), "ModelPruning: ", module.name(), " has no parameter named ",
            fmt::format("{}", fmt::join(options_.parameter_names(), " or ")), " to prune; set parameters_to_prune");
  // Structured methods prune slices along pruning_dim: said now, not at the first epoch's end.
  if (!structured(options_.pruning_fn())) return;
  const int64_t dim = *options_.pruning_dim();
  for (const auto& target : targets_) {
    const int64_t dims = target.parameter.dim();
    ARC_CHECK(dims > 1, "ModelPruning: structured pruning needs a tensor of 2 or more dimensions, and ", target.name,
              " has ", dims, "; leave it out (parameter_names: [weight]) or prune it unstructured");
    ARC_CHECK(dim >= -dims && dim < dims, "ModelPruning: pruning_dim is ", dim, ", which is not a dimension of ",
              target.name, " (", dims, " of them); give one from ", -dims, " to ", dims - 1);
  }
}

void ModelPruning::on_fit_start(Trainer& trainer, TrainModule&) {
  ARC_CHECK(!trainer.strategy().parameters_sharded(), "ModelPruning masks the parameters in place between ",
            "steps, but under fsdp's FULL_SHARD the parameters of arc::ShardedUnit submodules are whole only on the ",
            "rank that owns them; use sharding_strategy \"SHARD_GRAD_OP\", which keeps them whole on every rank");
  ARC_CHECK(!trainer.strategy().sharded_checkpoints(), "ModelPruning writes the pruned weights of every parameter ",
            "into rank 0's checkpoint, but with fsdp's state_dict_type \"sharded\" each rank writes the parameters ",
            "it owns; use state_dict_type \"full\"");
  masked_step_ = -1;
  if (restored_) {
    restored_ = false;
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& target : targets_) target.original = target.parameter.detach().clone();
  pruned_epoch_ = -1;
  apply_masks();
}

void ModelPruning::on_before_optimizer_step(Trainer&, TrainModule&, torch::optim::Optimizer&) {
  torch::NoGradGuard no_grad;
  for (auto& target : targets_)
    if (target.mask.defined() && target.parameter.grad().defined()) target.parameter.mutable_grad().mul_(target.mask);
}

// After an optimizer step (not after a batch that only accumulated).
void ModelPruning::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  if (trainer.global_step() == masked_step_) return;
  masked_step_ = trainer.global_step();
  apply_masks();
}

void ModelPruning::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (!options_.prune_on_train_epoch_end() || trainer.current_epoch() <= pruned_epoch_) return;
  pruned_epoch_ = trainer.current_epoch();
  run_pruning(trainer, trainer.current_epoch());
}

void ModelPruning::on_validation_epoch_end(Trainer& trainer, TrainModule&) {
  if (!options_.prune_on_train_epoch_end() && trainer.stage() == Stage::fit && !trainer.sanity_checking())
    run_pruning(trainer, trainer.current_epoch());
}

void ModelPruning::on_train_end(Trainer&, TrainModule&) {
  apply_masks();
  if (options_.make_pruning_permanent()) targets_.clear();
}

void ModelPruning::run_pruning(Trainer& trainer, int64_t epoch) {
  if (!options_.apply_pruning()(epoch)) return;
  const auto amount = options_.amount()(epoch);
  if (amount.value == 0) return;
  apply_pruning(trainer, amount);
  if (options_.use_lottery_ticket_hypothesis()(epoch)) {
    reset_to_first_values();
    if (options_.resample_parameters() && trainer.world_size() > 1) {
      const CollectiveName name("ModelPruning resampled weights");
      for (auto& target : targets_) trainer.strategy().broadcast(target.parameter, 0);
    }
    apply_masks();
  }
}

std::vector<torch::Tensor> ModelPruning::new_masks(PruningAmount amount) const {
  torch::NoGradGuard no_grad;
  const auto& method = options_.pruning_fn();
  const auto mask_of = [](const Target& target) {
    return target.mask.defined() ? target.mask : torch::ones_like(target.parameter);
  };
  std::vector<torch::Tensor> out;
  if (options_.use_global_unstructured()) {
    std::vector<torch::Tensor> scores, masks, parameters;
    for (const auto& target : targets_) {
      scores.push_back(target.parameter.detach().flatten());
      masks.push_back(mask_of(target).flatten());
      parameters.push_back(target.parameter);
    }
    return split_like(unstructured_mask(torch::cat(scores), torch::cat(masks), amount, method == "random_unstructured",
                                        "the pruned parameters together"),
                      parameters);
  }
  for (const auto& target : targets_) {
    const auto weight = target.parameter.detach();
    if (structured(method)) {
      out.push_back(structured_mask(weight, mask_of(target), *options_.pruning_dim(), method == "random_structured",
                                    options_.pruning_norm().value_or(2.0), amount, target.name));
    } else {
      out.push_back(unstructured_mask(weight.flatten(), mask_of(target).flatten(), amount,
                                      method == "random_unstructured", target.name)
                        .view_as(weight));
    }
  }
  return out;
}

void ModelPruning::apply_pruning(Trainer& trainer, PruningAmount amount) {
  const bool reports = options_.verbose() > 0 && trainer.is_global_zero();
  std::vector<int64_t> before;
  for (const auto& target : targets_)
    if (reports) before.push_back(target.mask.defined() ? (target.mask == 0).sum().item<int64_t>() : 0);
  auto masks = new_masks(amount);
  // One rank's masks on every rank: random methods draw, and all must prune alike (once an epoch).
  if (trainer.world_size() > 1) {
    const CollectiveName name("ModelPruning masks");
    for (auto& mask : masks) trainer.strategy().broadcast(mask, 0);
  }
  for (size_t i = 0; i < targets_.size(); ++i) targets_[i].mask = masks[i];
  apply_masks();
  if (!reports) return;
  int64_t total = 0, zeros_before = 0, zeros_after = 0;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const int64_t size = targets_[i].mask.numel();
    const int64_t zeros = (targets_[i].mask == 0).sum().item<int64_t>();
    total += size;
    zeros_before += before[i];
    zeros_after += zeros;
    if (options_.verbose() == 2)
      console().info("ModelPruning: {} with amount={}: pruned {} ({:.2f}%) -> {} ({:.2f}%)", targets_[i].name,
                     amount.value, before[i], sparsity(before[i], size), zeros, sparsity(zeros, size));
  }
  console().info("ModelPruning: applied {}. Pruned: {}/{} ({:.2f}%) -> {}/{} ({:.2f}%)", options_.pruning_fn(),
                 zeros_before, total, sparsity(zeros_before, total), zeros_after, total, sparsity(zeros_after, total));
}

void ModelPruning::reset_to_first_values() {
  torch::NoGradGuard no_grad;
  std::map<const torch::nn::Module*, std::shared_ptr<torch::nn::Module>> drawn;
  for (auto& target : targets_) {
    if (!options_.resample_parameters()) {
      target.parameter.copy_(target.original);
      continue;
    }
    auto& copy = drawn[target.owner];
    if (!copy) copy = resampled(*target.owner, target.name);
    const auto local = target.name.substr(target.name.rfind('.') + 1);
    target.parameter.copy_(copy->named_parameters(/*recurse=*/false)[local]);
  }
}

void ModelPruning::apply_masks() {
  torch::NoGradGuard no_grad;
  for (auto& target : targets_)
    if (target.mask.defined()) target.parameter.mul_(target.mask);
}

std::vector<std::pair<std::string, torch::Tensor>> ModelPruning::masks() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& target : targets_)
    if (target.mask.defined()) out.emplace_back(target.name, target.mask);
  return out;
}

// The checkpoint's weights are the pruned ones (Lightning's make_pruning_permanent); the masks and
// the first values go under the callback, for a resumed fit.
void ModelPruning::on_save_checkpoint(Trainer&, TrainModule&, CheckpointWriter& writer) {
  const std::string prefix = "callbacks/" + state_key() + "/";
  for (const auto& target : targets_) {
    if (target.original.defined()) writer.add(prefix + "original/" + target.name, target.original);
    if (!target.mask.defined()) continue;
    writer.add(prefix + "mask/" + target.name, target.mask);
    writer.replace("model/" + target.name, target.parameter.detach() * target.mask);
  }
}

void ModelPruning::on_load_checkpoint(Trainer& trainer, TrainModule&, const CheckpointReader& reader) {
  const std::string prefix = "callbacks/" + state_key() + "/";
  for (const auto& target : targets_) {
    if (reader.contains(prefix + "original/" + target.name)) continue;
    if (trainer.is_global_zero())
      console().warn(
          "ModelPruning: checkpoint '{}' holds no pruning state for {} (saved without the callback, or "
          "after a fit that made its pruning permanent); pruning starts afresh from its weights",
          reader.path(), target.name);
    return;
  }
  for (auto& target : targets_) {
    const auto original = prefix + "original/" + target.name;
    target.original = reader.tensor(original).to(target.parameter.device());
    const auto mask = prefix + "mask/" + target.name;
    target.mask = reader.contains(mask) ? reader.tensor(mask).to(target.parameter.device()) : torch::Tensor();
  }
  restored_ = true;
}

}  // namespace arc
