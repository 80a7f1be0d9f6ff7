// WeightAveraging, EMAWeightAveraging and StochasticWeightAveraging: Lightning's weight-averaging
// callbacks. A copy of the module's parameters and buffers is averaged as training goes; once
// averaged, validation runs with the averaged weights, checkpoints save them as the module's (the
// current ones under the callback's key, so that resuming continues exactly), and fit ends with them
// in the module. Before the first update the average is the weights themselves.
#pragma once

#include <arc/core/callback.h>

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// Averages every optimizer step for which should_update says so. The default average is the
/// equal-weight mean of every update so far (torch.optim.swa_utils.AveragedModel's); subclasses
/// change `average` and `should_update`. Integer buffers (BatchNorm's counter) take the latest value.
class WeightAveraging : public Callback {
 public:
  /// `use_buffers`: average buffers too (BatchNorm's running statistics), as Lightning's default.
  /// `device`: where the averages are kept (unset: beside the module's tensors), e.g. the CPU, so
  /// that they take no GPU memory.
  explicit WeightAveraging(bool use_buffers = true, std::optional<torch::Device> device = std::nullopt);
  std::string state_key() const override { return "WeightAveraging"; }

  /// Whether to update after the optimizer step `step_idx` (0-based) or at the end of epoch
  /// `epoch_idx` (one of them is given). Default: after every step.
  virtual bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const;
  /// Folds `current` into `averaged`, which has been updated `updates` times before (0: a copy);
  /// both are on the averages' device.
  virtual void average(torch::Tensor& averaged, const torch::Tensor& current, int64_t updates) const;

  /// The averaged parameters and buffers, in the module's order (empty before fit).
  const std::vector<torch::Tensor>& averaged() const { return averaged_; }
  /// How many times the averages were updated.
  int64_t updates() const { return updates_; }

  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_epoch_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  void on_save_checkpoint(Trainer& trainer, TrainModule& module, CheckpointWriter& writer) override;
  void on_load_checkpoint(Trainer& trainer, TrainModule& module, const CheckpointReader& reader) override;

 protected:
  /// The training epoch at the update being decided.
  int64_t epoch() const { return epoch_; }
  /// In on_fit_start: whether this fit resumes, its state restored from the checkpoint.
  bool resuming() const { return restored_; }

 private:
  /// Takes the module's tensors to average (in checkpoint order) and starts the averages as copies.
  void track(TrainModule& module);
  void update();
  /// Exchanges the module's values with the averaged ones.
  void swap();

  bool use_buffers_;
  std::optional<torch::Device> device_;
  /// The module's parameters (and buffers) being averaged, found once per fit.
  std::vector<torch::Tensor> tracked_;
  std::vector<torch::Tensor> averaged_;
  int64_t updates_ = 0;
  int64_t latest_update_step_ = -1;
  int64_t latest_update_epoch_ = -1;
  int64_t epoch_ = 0;
  bool swapped_ = false;
  /// A resumed fit's state came from the checkpoint: the next on_fit_start keeps it.
  bool restored_ = false;
};

/// Stochastic Weight Averaging (Izmailov et al. 2018), as Lightning's callback: from epoch
/// `swa_epoch_start` on, each parameter group's learning rate anneals to its SWA rate over
/// `annealing_epochs` epochs ("cos" or "linear", as torch's SWALR, overriding the module's schedulers),
/// the parameters are averaged at every epoch's end, and fit ends with the average in the module,
/// after one pass over the training data in train mode recomputes the BatchNorm statistics (of
/// torch::nn::BatchNorm{1,2,3}d and arc::SyncBatchNorm layers) for the averaged weights.
class StochasticWeightAveraging : public WeightAveraging {
 public:
  /// `swa_lrs`: one rate for every parameter group, or one per group. `swa_epoch_start`: the epoch
  /// (counted from 1) or, below 1, the fraction of max_epochs where averaging starts. `device`: where
  /// the average is kept, the CPU by default, as Lightning's (unset: beside the module's weights).
  explicit StochasticWeightAveraging(std::vector<double> swa_lrs, double swa_epoch_start = 0.8,
                                     int64_t annealing_epochs = 10, std::string annealing_strategy = "cos",
                                     std::optional<torch::Device> device = torch::Device(torch::kCPU));
  std::string state_key() const override { return "StochasticWeightAveraging"; }
  bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const override;
  /// The first averaged epoch, 0-based (known once fit started).
  int64_t swa_start() const { return start_; }

  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_start(Trainer& trainer, TrainModule& module, Batch& batch, int64_t batch_idx) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

 private:
  std::vector<double> swa_lrs_;
  double epoch_start_;
  int64_t annealing_epochs_;
  std::string strategy_;
  int64_t start_ = 0;
  /// Each parameter group's rate when averaging started, which the annealing leaves.
  std::vector<double> initial_lrs_;
};

/// An exponential moving average: averaged = decay * averaged + (1 - decay) * current, every
/// `update_every_n_steps` optimizer steps from `update_starting_at_step` or the start of
/// `update_starting_at_epoch` on. `use_buffers` and `device` as WeightAveraging's.
class EMAWeightAveraging : public WeightAveraging {
 public:
  /// The average with `decay` (in [0, 1]), updated every `update_every_n_steps` (at least 1) steps;
  /// unset starting points: from the first step.
  explicit EMAWeightAveraging(double decay = 0.999, int64_t update_every_n_steps = 1,
                              std::optional<int64_t> update_starting_at_step = std::nullopt,
                              std::optional<int64_t> update_starting_at_epoch = std::nullopt, bool use_buffers = true,
                              std::optional<torch::Device> device = std::nullopt);
  std::string state_key() const override { return "EMAWeightAveraging"; }
  bool should_update(std::optional<int64_t> step_idx, std::optional<int64_t> epoch_idx) const override;
  void average(torch::Tensor& averaged, const torch::Tensor& current, int64_t updates) const override;

 private:
  double decay_;
  int64_t every_;
  std::optional<int64_t> from_step_;
  std::optional<int64_t> from_epoch_;
};

}  // namespace arc
