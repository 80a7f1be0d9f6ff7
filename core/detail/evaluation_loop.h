// EvaluationLoop: one pass of validation, test or prediction, without gradients.
#pragma once

#include <arc/core/metric_store.h>
#include <arc/core/trainer_options.h>
#include <arc/data/data_module.h>

#include <torch/types.h>

#include <memory>
#include <vector>

namespace arc {

class DataLoader;
class Trainer;
class TrainModule;

namespace detail {
struct RunState;
}

/// A stage's loaders, in dataloader_idx order.
using Loaders = std::vector<std::unique_ptr<DataLoader>>;

/// How many of `available` batches `limit` (the option named `option`) selects. Of a stream's
/// unknown length only all (kUnknownLength) or a count can be selected; a fraction is an error.
int64_t limited_batches(int64_t available, const BatchAmount& limit, const char* option);
/// `limit` (the option named `option`) of each loader's batches.
std::vector<int64_t> limited_batches(const Loaders& loaders, const BatchAmount& limit, const char* option);

/// Runs validation_step, test_step or predict_step over a stage's loaders with their hooks: the
/// stage's start and epoch hooks once, the steps loader after loader.
class EvaluationLoop {
 public:
  /// `stage` is validate (also inside fit), test or predict.
  EvaluationLoop(Trainer& trainer, detail::RunState& state, TrainModule& module, Stage stage);

  /// Runs `batches[i]` batches of loader i (fewer if it ends first); the epoch metrics.
  Metrics run(Loaders& loaders, const std::vector<int64_t>& batches);
  /// predict_step's outputs, loader after loader; none unless `keep` (the hooks see each output).
  std::vector<torch::Tensor> predict(Loaders& loaders, const std::vector<int64_t>& batches, bool keep);

 private:
  void start(const std::vector<int64_t>& batches);
  /// Fetches each loader's batches onto the device and runs `step(loader, batch, batch_idx,
  /// dataloader_idx)` on them.
  template <typename Step>
  void each_batch(Loaders& loaders, const std::vector<int64_t>& batches, const char* next_action, Step&& step);

  Trainer& trainer_;
  detail::RunState& state_;
  TrainModule& module_;
  Stage stage_;
};

}  // namespace arc
