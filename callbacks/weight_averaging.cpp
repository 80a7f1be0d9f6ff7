// WeightAveraging and EMAWeightAveraging.
#include <arc/callbacks/weight_averaging.h>

#include <arc/base/error.h>
#include <arc/core/checkpoint.h>
#include <arc/core/trainer.h>

#include <torch/torch.h>

namespace arc {

WeightAveraging::WeightAveraging(bool use_buffers) : use_buffers_(use_buffers) {}

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
  for (const auto& tensor : tracked_) averaged_.push_back(tensor.detach().clone());
}

// A resumed fit restored the averages before this (on_load_checkpoint); a new one starts them.
void WeightAveraging::on_fit_start(Trainer&, TrainModule& module) {
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
      average(averaged_[i], tracked_[i], updates_);
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
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) tracked_[i].copy_(averaged_[i]);
}

// Validation in fit (the sanity check too) sees the averaged weights; validate() alone has none.
void WeightAveraging::on_validation_epoch_start(Trainer& trainer, TrainModule&) {
  if (trainer.stage() == Stage::fit && !averaged_.empty() && !swapped_) swap();
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
    const auto& average = swapped_ ? state[i].second : averaged_[i];
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
  for (size_t i = 0; i < tracked_.size(); ++i) reader.read_into(prefix + state[i].first, tracked_[i]);
  swapped_ = false;
  restored_ = true;
}

EMAWeightAveraging::EMAWeightAveraging(double decay, int64_t update_every_n_steps,
                                       std::optional<int64_t> update_starting_at_step,
                                       std::optional<int64_t> update_starting_at_epoch)
    : decay_(decay),
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

}  // namespace arc
