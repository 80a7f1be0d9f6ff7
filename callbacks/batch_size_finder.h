// BatchSizeFinder: Lightning's callback that searches for the largest training batch size that fits
// in memory at the start of fit, and trains with it.
#pragma once

#include <arc/core/callback.h>
#include <arc/core/tuner.h>

#include <cstdint>
#include <optional>
#include <string>

namespace arc {

/// At fit start, before the first step, arc::Tuner's scale_batch_size search on the fit's own
/// training data and loop: trials of `steps_per_trial` steps with growing batch sizes until one runs
/// out of memory, leaving the weights as they were; then the fit trains with the size found, as if its
/// data had been given that size: the training data is loaded again with it (also when
/// reload_dataloaders_every_n_epochs loads it anew), the optimizers are built again (a scheduler
/// counting estimated_stepping_batches counts the new batches) and the module's hyper-parameter
/// `batch_arg_name`, when it has one, holds it (hparams.yaml records it). Validation keeps its own
/// batch size. Lightning's needs a `batch_size` attribute that its data hooks read; here any training
/// data will do except a CombinedLoader. One process only, as Lightning's (a DDP fit is an error at
/// fit start, before anything trains). Checkpoints keep the size: a resumed fit trains with it again
/// instead of searching, so that it continues exactly. fast_dev_run skips the search, as Lightning's.
/// Subclasses that search elsewhere override on_fit_start; the search runs only before the first step.
class BatchSizeFinder : public Callback {
 public:
  /// Searches as `options` say; the module's hyper-parameter `batch_arg_name` records the size found.
  explicit BatchSizeFinder(BatchSizeOptions options = {}, std::string batch_arg_name = "batch_size");
  std::string state_key() const override { return "BatchSizeFinder"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// The search now, and the fit set to train with the size found.
  void scale_batch_size(Trainer& trainer, TrainModule& module);
  /// The size the last search found (or the resumed checkpoint holds); none before.
  std::optional<int64_t> optimal_batch_size() const { return optimal_batch_size_; }

 private:
  BatchSizeOptions options_;
  std::string batch_arg_name_;
  std::optional<int64_t> optimal_batch_size_;
};

}  // namespace arc
