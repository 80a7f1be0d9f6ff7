// TensorDataset: batches by index_select over the first dimension.
#include <arc/data/dataset.h>

#include <arc/base/error.h>

#include <torch/torch.h>

namespace arc {
namespace {

torch::Tensor rows(const torch::Tensor& tensor, const torch::Tensor& index) { return tensor.index_select(0, index); }

}  // namespace

TensorDataset::TensorDataset(std::vector<torch::Tensor> tensors,
                             std::vector<std::pair<std::string, torch::Tensor>> named)
    : tensors_(std::move(tensors)), named_(std::move(named)) {
  ARC_CHECK(!tensors_.empty() || !named_.empty(), "TensorDataset got no tensors; pass at least one, e.g. ",
            "TensorDataset({inputs, targets})");
  size_ = !tensors_.empty() ? tensors_.front().size(0) : named_.front().second.size(0);
  for (const auto& tensor : tensors_)
    ARC_CHECK(tensor.dim() > 0 && tensor.size(0) == size_,
              "TensorDataset tensors must share their first dimension: ", size_, " vs ", tensor.sizes());
  for (const auto& entry : named_)
    ARC_CHECK(entry.second.dim() > 0 && entry.second.size(0) == size_, "TensorDataset tensor '", entry.first,
              "' has first dimension ", entry.second.sizes(), ", expected ", size_);
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  const auto index =
      torch::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())}, torch::kLong);
  Batch batch;
  for (const auto& tensor : tensors_) batch.add(rows(tensor, index));
  for (const auto& entry : named_) batch.set(entry.first, rows(entry.second, index));
  return batch;
}

void SampleStream::skip(int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!next()) return;
}

void SampleStream::load_state(const nlohmann::json& state) {
  ARC_FAIL("the stream's state() gave ", state.dump(), ", but it has no load_state() to go back there; override ",
           "SampleStream::load_state, or return null from state() to resume by reading the stream again");
}

}  // namespace arc
