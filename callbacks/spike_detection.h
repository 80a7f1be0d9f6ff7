// SpikeDetection: Lightning's callback that ends a fit when the training loss spikes, and lists the
// batches to skip when the run resumes.
#pragma once

#include <arc/base/arg.h>
#include <arc/base/error.h>
#include <arc/core/callback.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace arc {

/// Ends fit (on every rank) where SpikeDetection found a spike.
class TrainingSpikeException : public Error {
 public:
  using Error::Error;
};

/// SpikeDetection's settings (Lightning's names and defaults).
struct SpikeDetectionOptions {
  /// "min": a loss above the last one may be a spike; "max": a value below it.
  ARC_ARG(std::string, mode) = "min";
  /// The running mean that a value is compared with is over this many batches.
  ARC_ARG(int64_t, window) = 10;
  /// Batches at each epoch's start that are not checked (the epoch's batch index, as Lightning's).
  ARC_ARG(int64_t, warmup) = 1;
  /// A spike is this far from the running mean at least (none: any distance) ...
  ARC_ARG(std::optional<double>, atol) = std::nullopt;
  /// ... and this many times the running mean at least (none: any distance).
  ARC_ARG(std::optional<double>, rtol) = 2.0;
  /// The JSON file of batches to skip; a folder gets "skip_batches.json" in it; empty: in the
  /// Trainer's default_root_dir.
  ARC_ARG(std::string, exclude_batches_path) = "";
  /// As Lightning's code (not its docstring): true, a NaN or infinite loss is a spike; false, it is
  /// not. A loss that is not finite on any rank never enters the running mean.
  ARC_ARG(bool, finite_only) = true;
};

/// After each training batch, compares the loss with the running mean of the last `window` losses:
/// a loss that did not improve on the last one and is at least `atol` and `rtol` times the mean away
/// from the mean is a spike. Under DDP each rank keeps its own statistics and every rank stops when
/// any rank sees a spike (one small all-reduce per batch, as Lightning's). On a spike rank 0 writes the
/// batch indices [batch_idx - 1, batch_idx] (the batch before may have harmed the weights), after those
/// of earlier spikes, as a JSON list to exclude_batches_path, and fit ends with TrainingSpikeException.
/// Checkpoints keep the running statistics and the batches listed, so a resumed fit goes on exactly.
class SpikeDetection : public Callback {
 public:
  /// Detects spikes as `options` say.
  explicit SpikeDetection(SpikeDetectionOptions options = {});
  std::string state_key() const override { return "SpikeDetection"; }
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;

  /// The batch indices listed so far.
  const std::vector<int64_t>& bad_batches() const { return bad_batches_; }
  /// Where the list goes in `trainer`'s run.
  std::string exclude_batches_path(const Trainer& trainer) const;

 private:
  bool is_spike(double value) const;
  [[noreturn]] void handle_spike(Trainer& trainer, int64_t batch_idx);

  SpikeDetectionOptions options_;
  std::deque<double> window_;
  double last_value_ = 0;
  std::vector<int64_t> bad_batches_;
};

}  // namespace arc
