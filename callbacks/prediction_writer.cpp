// BasePredictionWriter.
#include <arc/callbacks/prediction_writer.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <arc/base/output_file.h>
#include <arc/fabric/detail/torch_save.h>

#include <torch/types.h>

#include <filesystem>

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

WriteInterval write_interval_named(const std::string& name) {
  if (name == "batch") return WriteInterval::batch;
  if (name == "epoch") return WriteInterval::epoch;
  ARC_CHECK(name == "batch_and_epoch", "PredictionWriter write_interval must be \"batch\", \"epoch\" or ",
            "\"batch_and_epoch\", got '", name, "'");
  return WriteInterval::batch_and_epoch;
}

namespace {

torch::Tensor indices_tensor(const std::vector<int64_t>& indices) { return torch::tensor(indices, torch::kLong); }

// A list of tensors that pickles as a Python list.
c10::impl::GenericList list_of(const std::vector<torch::Tensor>& tensors) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (const auto& tensor : tensors) list.push_back(tensor);
  return list;
}

// {"predictions": ..., "batch_indices": ...} as torch.save writes it, written whole to `path`.
void write_whole(const std::string& path, const c10::IValue& predictions, const c10::IValue& batch_indices) {
  c10::impl::GenericDict contents(c10::StringType::get(), c10::AnyType::get());
  contents.insert("predictions", predictions);
  contents.insert("batch_indices", batch_indices);
  OutputFile file(path, "predictions", "PredictionWriter's output_dir");
  detail::torch_save(contents, file);
  file.commit();
}

}  // namespace

PredictionWriter::PredictionWriter(std::string output_dir, WriteInterval write_interval)
    : BasePredictionWriter(write_interval), output_dir_(std::move(output_dir)) {
  ARC_CHECK(!output_dir_.empty(), "PredictionWriter needs an output_dir");
}

void PredictionWriter::on_predict_start(Trainer& trainer, TrainModule& module) {
  BasePredictionWriter::on_predict_start(trainer, module);
  std::error_code made;
  std::filesystem::create_directories(output_dir_, made);
  ARC_CHECK(!made, "PredictionWriter cannot make its output_dir '", output_dir_, "' (", made.message(),
            "); choose a folder it can make, or make that one writable");
}

void PredictionWriter::write_on_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor& prediction,
                                          const std::vector<int64_t>& batch_indices, const Batch&, int64_t batch_idx,
                                          int64_t dataloader_idx) {
  write_whole(output_dir_ + "/rank_" + std::to_string(trainer.global_rank()) + "_dataloader_" +
                  std::to_string(dataloader_idx) + "_batch_" + std::to_string(batch_idx) + ".pt",
              prediction.detach().cpu(), indices_tensor(batch_indices));
}

void PredictionWriter::write_on_epoch_end(Trainer& trainer, TrainModule&, const std::vector<torch::Tensor>& predictions,
                                          const std::vector<std::vector<int64_t>>& batch_indices) {
  std::vector<torch::Tensor> on_cpu, indices;
  for (const auto& prediction : predictions) on_cpu.push_back(prediction.detach().cpu());
  for (const auto& batch : batch_indices) indices.push_back(indices_tensor(batch));
  write_whole(output_dir_ + "/predictions_rank_" + std::to_string(trainer.global_rank()) + ".pt", list_of(on_cpu),
              list_of(indices));
}

}  // namespace arc
