// EvaluationLoop: one pass of validation, test or prediction, without gradients.
#pragma once

#include <arc/core/metric_store.h>
#include <arc/core/trainer_options.h>
#include <arc/data/data_module.h>

#include <torch/types.h>

#include <vector>

namespace arc {

class DataLoader;
class Trainer;
class TrainModule;

namespace detail {
struct RunState;
}

/// Runs validation_step, test_step or predict_step over a loader with their hooks.
class EvaluationLoop {
 public:
  /// `stage` is validate (also inside fit), test or predict.
  EvaluationLoop(Trainer& trainer, detail::RunState& state, TrainModule& module, Stage stage);

  /// Runs up to `limit` of the loader's batches and returns the epoch metrics.
  Metrics run(DataLoader& loader, const BatchAmount& limit);
  /// Runs exactly `batches` batches (sanity checks and validation inside fit).
  Metrics run_batches(DataLoader& loader, int64_t batches);
  /// predict_step's outputs for up to `limit` batches.
  std::vector<torch::Tensor> predict(DataLoader& loader, const BatchAmount& limit);

 private:
  Trainer& trainer_;
  detail::RunState& state_;
  TrainModule& module_;
  Stage stage_;
};

}  // namespace arc
