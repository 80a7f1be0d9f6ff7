// BasePredictionWriter: Lightning's callback for writing predictions as they come, per rank, instead
// of keeping them all in memory (what predict returns).
#pragma once

#include <arc/core/callback.h>

#include <cstdint>
#include <string>
#include <vector>

namespace arc {

/// When a writer writes: after every batch, once at the end of predict, or both.
enum class WriteInterval { batch, epoch, batch_and_epoch };

/// Subclass it and override write_on_batch_end, write_on_epoch_end or both (as the interval
/// needs). Every rank writes its own share; `batch_indices` are the dataset indices of the
/// predictions' samples, so that the shares can be put back together in the dataset's order.
class BasePredictionWriter : public Callback {
 public:
  /// A writer that writes at `write_interval`.
  explicit BasePredictionWriter(WriteInterval write_interval = WriteInterval::batch);
  std::string state_key() const override { return "BasePredictionWriter"; }

  /// After each batch's predict_step (WriteInterval::batch or batch_and_epoch): `prediction` is what
  /// it returned for `batch`. The default is an error, for a writer that does not override it.
  virtual void write_on_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& prediction,
                                  const std::vector<int64_t>& batch_indices, const Batch& batch, int64_t batch_idx,
                                  int64_t dataloader_idx);
  /// After predict's last batch (WriteInterval::epoch or batch_and_epoch): every batch's prediction
  /// and indices, in order. The default is an error, for a writer that does not override it.
  virtual void write_on_epoch_end(Trainer& trainer, TrainModule& module, const std::vector<torch::Tensor>& predictions,
                                  const std::vector<std::vector<int64_t>>& batch_indices);

  void on_predict_start(Trainer& trainer, TrainModule& module) override;
  void on_predict_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& outputs, Batch& batch,
                            int64_t batch_idx) override;
  void on_predict_epoch_end(Trainer& trainer, TrainModule& module) override;

  /// When it writes.
  WriteInterval write_interval() const { return interval_; }

 private:
  WriteInterval interval_;
  std::vector<torch::Tensor> predictions_;
  std::vector<std::vector<int64_t>> batch_indices_;
};

/// "batch", "epoch" or "batch_and_epoch" (Lightning's write_interval names).
WriteInterval write_interval_named(const std::string& name);

/// The writer a config can name (`PredictionWriter`, init_args output_dir and write_interval), so
/// that `arc predict` leaves its predictions in files. Each rank writes its own, which Python's
/// `torch.load` (weights_only too) and LibTorch's `torch::pickle_load` read as a dict of "predictions" and
/// "batch_indices" (the dataset indices of their samples): after every batch
/// `<output_dir>/rank_<r>_dataloader_<d>_batch_<i>.pt` (a tensor each), at the end
/// `<output_dir>/predictions_rank_<r>.pt` (a list of tensors each, one per batch). A file is written
/// whole (OutputFile), so none is ever half-written. output_dir is made when predict starts.
class PredictionWriter : public BasePredictionWriter {
 public:
  /// Writes into `output_dir` at `write_interval`.
  explicit PredictionWriter(std::string output_dir, WriteInterval write_interval = WriteInterval::batch);
  std::string state_key() const override { return "PredictionWriter"; }

  void on_predict_start(Trainer& trainer, TrainModule& module) override;

  void write_on_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& prediction,
                          const std::vector<int64_t>& batch_indices, const Batch& batch, int64_t batch_idx,
                          int64_t dataloader_idx) override;
  void write_on_epoch_end(Trainer& trainer, TrainModule& module, const std::vector<torch::Tensor>& predictions,
                          const std::vector<std::vector<int64_t>>& batch_indices) override;

 private:
  std::string output_dir_;
};

}  // namespace arc
