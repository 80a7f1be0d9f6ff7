// Datasets: anything that can hand out a batch of samples by index, including any torch::data
// dataset through an adapter.
#pragma once

#include <arc/data/batch.h>

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace arc {

/// A finite, indexable source of samples. `get_batch` is called from loader worker threads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// The samples at `indices`, collated into one batch.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

/// Samples are rows of tensors that share their first dimension.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<torch::Tensor> tensors,
                         std::vector<std::pair<std::string, torch::Tensor>> named = {});

  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::vector<torch::Tensor> tensors_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  int64_t size_ = 0;
};

/// Any `torch::data` dataset of `Example<>` samples: data and target are stacked into
/// `batch[0]` and `batch[1]`.
template <typename TorchDataset>
class TorchDatasetAdapter : public Dataset {
 public:
  explicit TorchDatasetAdapter(TorchDataset dataset) : dataset_(std::move(dataset)) {}

  int64_t size() const override { return static_cast<int64_t>(dataset_.size().value()); }

  Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::vector<torch::Tensor> data, target;
    data.reserve(indices.size());
    target.reserve(indices.size());
    for (const int64_t index : indices) {
      auto example = dataset_.get(static_cast<size_t>(index));
      data.push_back(std::move(example.data));
      target.push_back(std::move(example.target));
    }
    return Batch{torch::stack(data), torch::stack(target)};
  }

 private:
  // torch::data datasets declare get() non-const.
  mutable TorchDataset dataset_;
};

/// Wraps a torch::data dataset: `arc::from_torch(torch::data::datasets::MNIST(root))`.
template <typename TorchDataset>
std::shared_ptr<Dataset> from_torch(TorchDataset dataset) {
  return std::make_shared<TorchDatasetAdapter<TorchDataset>>(std::move(dataset));
}

}  // namespace arc
