// BasePredictionWriter.
#include <arc/callbacks/prediction_writer.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

namespace arc {

BasePredictionWriter::BasePredictionWriter(WriteInterval write_interval) : interval_(write_interval) {}

void BasePredictionWriter::write_on_batch_end(Trainer&, TrainModule&, const torch::Tensor&, const std::vector<int64_t>&,
                                              const Batch&, int64_t, int64_t) {
  ARC_FAIL(state_key(), " writes after every batch (WriteInterval::batch or batch_and_epoch) but does not override ",
           "write_on_batch_end; override it, or construct the writer with WriteInterval::epoch");
}

void BasePredictionWriter::write_on_epoch_end(Trainer&, TrainModule&, const std::vector<torch::Tensor>&,
                                              const std::vector<std::vector<int64_t>>&) {
  ARC_FAIL(state_key(), " writes at the end (WriteInterval::epoch or batch_and_epoch) but does not override ",
           "write_on_epoch_end; override it, or construct the writer with WriteInterval::batch");
}

void BasePredictionWriter::on_predict_start(Trainer&, TrainModule&) {
  predictions_.clear();
  batch_indices_.clear();
}

void BasePredictionWriter::on_predict_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& outputs,
                                                Batch& batch, int64_t batch_idx) {
  if (interval_ != WriteInterval::epoch)
    write_on_batch_end(trainer, module, outputs, trainer.batch_indices(), batch, batch_idx, trainer.dataloader_idx());
  if (interval_ == WriteInterval::batch) return;
  predictions_.push_back(outputs);
  batch_indices_.push_back(trainer.batch_indices());
}

void BasePredictionWriter::on_predict_epoch_end(Trainer& trainer, TrainModule& module) {
  if (interval_ == WriteInterval::batch) return;
  write_on_epoch_end(trainer, module, predictions_, batch_indices_);
  predictions_.clear();
  batch_indices_.clear();
}

}  // namespace arc
