// WeightAveraging, EMAWeightAveraging and StochasticWeightAveraging.
#include <arc/callbacks/weight_averaging.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>
#include <arc/fabric/checkpoint.h>

#include <arc/data/data_loader.h>
#include <arc/strategies/sync_batch_norm.h>

#include <torch/torch.h>

#include <cmath>

namespace arc {

WeightAveraging::WeightAveraging(bool use_buffers, std::optional<torch::Device> device)
    : use_buffers_(use_buffers), device_(device) {
  ARC_CHECK(!device || !device->is_cuda() || torch::cuda::is_available(), "the averaged weights' device is ",
            device->str(), ", but LibTorch sees no GPU here; keep them on the CPU or leave the device unset");
}

bool WeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t>) const {
  return step_idx.has_value();
}

void WeightAveraging::average(torch::Tensor& averaged, const torch::Tensor& current, int64_t updates) const {
  averaged.add_(current - averaged, 1.0 / static_cast<double>(updates + 1));
}

void WeightAveraging::track(TrainModule& module) {
  torch::NoGradGuard no_grad;
  tracked_.clear();
  averaged_.clear();
  for (const auto& [name, tensor] : named_state(module)) tracked_.push_back(tensor);
  if (!use_buffers_) tracked_.resize(module.parameters().size());
  for (const auto& tensor : tracked_)
    averaged_.push_back(tensor.detach().to(device_.value_or(tensor.device()), /*non_blocking=*/false, /*copy=*/true));
}

// A resumed fit restored the averages before this (on_load_checkpoint); a new one starts them.
void WeightAveraging::on_fit_start(Trainer& trainer, TrainModule& module) {
  ARC_CHECK(!trainer.strategy().parameters_sharded(), "weight averaging (EMA, SWA) reads every parameter after each ",
            "step, but under fsdp's FULL_SHARD the parameters of arc::ShardedUnit submodules are whole only on the ",
            "rank that owns them; use sharding_strategy \"SHARD_GRAD_OP\", which keeps them whole on every rank");
  ARC_CHECK(!trainer.strategy().sharded_checkpoints(), "weight averaging (EMA, SWA) writes the averaged weights of ",
            "every parameter into rank 0's checkpoint, but with fsdp's state_dict_type \"sharded\" each rank writes ",
            "the parameters it owns; use state_dict_type \"full\"");
  if (restored_) {
    restored_ = false;
    return;
  }
  track(module);
  updates_ = 0;
  latest_update_step_ = latest_update_epoch_ = -1;
  swapped_ = false;
}

void WeightAveraging::update() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) {
    if (updates_ == 0 || !averaged_[i].is_floating_point()) {
      averaged_[i].copy_(tracked_[i]);
    } else {
      average(averaged_[i], tracked_[i].to(averaged_[i].device()), updates_);
    }
  }
  ++updates_;
}

// After the optimizer step: the global step has advanced (a batch inside an accumulation window,
// or one skipped, leaves it, and updates nothing).
void WeightAveraging::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  epoch_ = trainer.current_epoch();
  const int64_t step = trainer.global_step();
  if (step > latest_update_step_ && step > 0 && should_update(step - 1, std::nullopt)) {
    update();
    latest_update_step_ = step;
  }
}

void WeightAveraging::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  epoch_ = trainer.current_epoch();
  if (epoch_ > latest_update_epoch_ && should_update(std::nullopt, epoch_)) {
    update();
    latest_update_epoch_ = epoch_;
  }
}

void WeightAveraging::swap() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) {
    auto held = tracked_[i].clone();
    tracked_[i].copy_(averaged_[i]);
    averaged_[i].copy_(held);
  }
  swapped_ = !swapped_;
}

void WeightAveraging::on_train_end(Trainer&, TrainModule&) {
  if (updates_ == 0) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) tracked_[i].copy_(averaged_[i]);
}

// Validation in fit sees the averaged weights once there are any; validate() alone has none.
void WeightAveraging::on_validation_epoch_start(Trainer& trainer, TrainModule&) {
  if (trainer.stage() == Stage::fit && updates_ > 0 && !swapped_) swap();
}

void WeightAveraging::on_validation_epoch_end(Trainer&, TrainModule&) {
  if (swapped_) swap();
}

nlohmann::json WeightAveraging::state_dict() const {
  return {{"updates", updates_},
          {"latest_update_step", latest_update_step_},
          {"latest_update_epoch", latest_update_epoch_}};
}

void WeightAveraging::load_state_dict(const nlohmann::json& state) {
  updates_ = state.at("updates").get<int64_t>();
  latest_update_step_ = state.at("latest_update_step").get<int64_t>();
  latest_update_epoch_ = state.at("latest_update_epoch").get<int64_t>();
}

// The checkpoint's module weights are the averaged ones; the current ones go under this callback.
void WeightAveraging::on_save_checkpoint(Trainer&, TrainModule& module, CheckpointWriter& writer) {
  if (averaged_.empty()) return;
  const auto state = named_state(module);
  for (size_t i = 0; i < averaged_.size(); ++i) {
    // Saved from inside validation, the module holds the averaged weights and this the current.
    const auto& current = swapped_ ? averaged_[i] : state[i].second;
    const auto& average = swapped_ || updates_ == 0 ? state[i].second : averaged_[i];
    writer.add("callbacks/" + state_key() + "/current/" + state[i].first, current);
    writer.replace("model/" + state[i].first, average);
  }
}

void WeightAveraging::on_load_checkpoint(Trainer&, TrainModule& module, const CheckpointReader& reader) {
  const auto state = named_state(module);
  const std::string prefix = "callbacks/" + state_key() + "/current/";
  ARC_CHECK(reader.contains(prefix + state.front().first), "checkpoint '", reader.path(), "' holds no ", state_key(),
            " state (it was saved without one); resume without the callback, or start afresh");
  track(module);  // the averages: the checkpoint's module weights, which the module holds now
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (size_t i = 0; i < tracked_.size(); ++i) targets.emplace_back(prefix + state[i].first, tracked_[i]);
  reader.read_all_into(targets);
  swapped_ = false;
  restored_ = true;
}

EMAWeightAveraging::EMAWeightAveraging(double decay, int64_t update_every_n_steps,
                                       std::optional<int64_t> update_starting_at_step,
                                       std::optional<int64_t> update_starting_at_epoch, bool use_buffers,
                                       std::optional<torch::Device> device)
    : WeightAveraging(use_buffers, device),
      decay_(decay),
      every_(update_every_n_steps),
      from_step_(update_starting_at_step),
      from_epoch_(update_starting_at_epoch) {
  ARC_CHECK(decay >= 0 && decay <= 1, "EMAWeightAveraging: decay is ", decay, "; give a value in [0, 1], e.g. 0.999");
  ARC_CHECK(update_every_n_steps >= 1, "EMAWeightAveraging: update_every_n_steps is ", update_every_n_steps,
            "; give 1 or more");
}

bool EMAWeightAveraging::should_update(std::optional<int64_t> step_idx, std::optional<int64_t>) const {
  if (!step_idx) return false;
  return *step_idx % every_ == 0 && (!from_step_ || *step_idx >= *from_step_) &&
         (!from_epoch_ || epoch() >= *from_epoch_);
}

void EMAWeightAveraging::average(torch::Tensor& averaged, const torch::Tensor& current, int64_t) const {
  averaged.lerp_(current, 1 - decay_);
}

namespace {

// The BatchNorm layers of `module` that keep running statistics.
std::vector<BatchNormLayer> norm_statistics(TrainModule& module) {
  std::vector<BatchNormLayer> out;
  for (const auto& child : module.modules(/*include_self=*/false))
    if (const auto norm = batch_norm_of(*child); norm && norm->options->track_running_stats()) out.push_back(*norm);
  return out;
}

}  // namespace

StochasticWeightAveraging::StochasticWeightAveraging(std::vector<double> swa_lrs, double swa_epoch_start,
                                                     int64_t annealing_epochs, std::string annealing_strategy,
                                                     std::optional<torch::Device> device)
    : WeightAveraging(/*use_buffers=*/false, device),
      swa_lrs_(std::move(swa_lrs)),
      epoch_start_(swa_epoch_start),
      annealing_epochs_(annealing_epochs),
      strategy_(std::move(annealing_strategy)) {
  ARC_CHECK(!swa_lrs_.empty(), "StochasticWeightAveraging: swa_lrs is empty; give one rate, e.g. {0.05}, or one per ",
            "parameter group");
  for (const double lr : swa_lrs_)
    ARC_CHECK(lr > 0, "StochasticWeightAveraging: swa_lrs holds ", lr, "; every rate must be > 0");
  ARC_CHECK(swa_epoch_start > 0 && (swa_epoch_start < 1 || swa_epoch_start == std::floor(swa_epoch_start)),
            "StochasticWeightAveraging: swa_epoch_start is ", swa_epoch_start,
            "; give an epoch number (1, 2, ...) or a fraction of max_epochs in (0, 1), e.g. 0.8");
  ARC_CHECK(annealing_epochs >= 0, "StochasticWeightAveraging: annealing_epochs is ", annealing_epochs,
            "; give 0 (the SWA rates at once) or more");
  ARC_CHECK(strategy_ == "cos" || strategy_ == "linear", "StochasticWeightAveraging: annealing_strategy is \"",
            strategy_, "\"; use \"cos\" or \"linear\"");
}

bool StochasticWeightAveraging::should_update(std::optional<int64_t>, std::optional<int64_t> epoch_idx) const {
  return epoch_idx && *epoch_idx >= start_;
}

// Lightning's start: the epoch number, or int(max_epochs * fraction), counted from 1.
void StochasticWeightAveraging::on_fit_start(Trainer& trainer, TrainModule& module) {
  int64_t first = static_cast<int64_t>(epoch_start_);
  if (epoch_start_ < 1) {
    const auto max_epochs = trainer.options().max_epochs();
    ARC_CHECK(max_epochs && *max_epochs > 0, "StochasticWeightAveraging: swa_epoch_start ", epoch_start_,
              " is a fraction of max_epochs, which is unset; set max_epochs, or give the epoch number");
    first = static_cast<int64_t>(static_cast<double>(*max_epochs) * epoch_start_);
  }
  start_ = std::max<int64_t>(first - 1, 0);
  if (!resuming()) initial_lrs_.clear();
  WeightAveraging::on_fit_start(trainer, module);
}

// torch's SWALR, stepped each epoch from the start: epoch start + k trains with
// swa_lr * a + initial * (1 - a), a = anneal(min(1, k / annealing_epochs)). Set before every batch,
// so that no scheduler of the module's moves it.
void StochasticWeightAveraging::on_train_batch_start(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  const int64_t k = trainer.current_epoch() - start_;
  if (k < 0 || trainer.optimizer_configs().empty()) return;
  auto& groups = trainer.optimizer_configs().front().optimizer->param_groups();
  ARC_CHECK(swa_lrs_.size() == 1 || swa_lrs_.size() == groups.size(), "StochasticWeightAveraging: ", swa_lrs_.size(),
            " swa_lrs for ", groups.size(), " parameter groups; give one rate, or one per group");
  if (initial_lrs_.empty())
    for (auto& group : groups) initial_lrs_.push_back(group.options().get_lr());
  const double t = annealing_epochs_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(k) / annealing_epochs_);
  const double a = strategy_ == "cos" ? (1 - std::cos(M_PI * t)) / 2 : t;
  for (size_t i = 0; i < groups.size(); ++i) {
    const double swa_lr = swa_lrs_.size() == 1 ? swa_lrs_.front() : swa_lrs_[i];
    groups[i].options().set_lr(swa_lr * a + initial_lrs_[i] * (1 - a));
  }
}

// The averaged weights in the module, then the BatchNorm statistics for them: reset, and recomputed
// as a cumulative average (momentum unset) over the training data's batches in train mode.
void StochasticWeightAveraging::on_train_end(Trainer& trainer, TrainModule& module) {
  WeightAveraging::on_train_end(trainer, module);
  auto norms = norm_statistics(module);
  DataLoader* loader = trainer.train_dataloader();
  if (updates() == 0 || norms.empty() || loader == nullptr) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::nn::BatchNormOptions> saved;
  for (auto& norm : norms) {
    saved.push_back(*norm.options);
    norm.options->momentum({});  // unset: a cumulative average
    norm.running_mean.zero_();
    norm.running_var.fill_(1);
    norm.num_batches_tracked.zero_();
  }
  const bool was_training = module.is_training();
  module.train();
  loader->start();
  for (int64_t batch_idx = 0; batch_idx < trainer.num_training_batches(); ++batch_idx) {
    auto fetched = loader->next();
    if (!fetched) break;
    Batch batch = trainer.transfer_batch(std::move(*fetched), 0);
    const auto autocast = trainer.precision().forward_context();  // the statistics of training's forward
    module.training_step(batch, batch_idx);
  }
  module.train(was_training);
  for (size_t i = 0; i < norms.size(); ++i) *norms[i].options = saved[i];
}

nlohmann::json StochasticWeightAveraging::state_dict() const {
  auto state = WeightAveraging::state_dict();
  state["initial_lrs"] = initial_lrs_;
  return state;
}

void StochasticWeightAveraging::load_state_dict(const nlohmann::json& state) {
  WeightAveraging::load_state_dict(state);
  initial_lrs_ = state.at("initial_lrs").get<std::vector<double>>();
}

}  // namespace arc
