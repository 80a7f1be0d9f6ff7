// Datasets: anything that can hand out a batch of samples by index, including any torch::data
// dataset through an adapter; and streams of samples of unknown length (iterable datasets).
#pragma once

#include <arc/data/batch.h>

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

/// A finite, indexable source of samples. `get_batch` is called from loader worker threads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// The number of samples; valid indices are 0 to size() - 1.
  virtual int64_t size() const = 0;
  /// The samples at `indices`, collated into one batch.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
};

/// Samples are rows of tensors that share their first dimension.
class TensorDataset : public Dataset {
 public:
  /// Rows of `tensors` as a sample's positional tensors and of `named` as its named ones; at least one
  /// tensor, all with the same first dimension.
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
  /// Reads `dataset`, which must know its size.
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

/// The batch count of a loader over a stream, which is known only once the stream has ended
/// (Lightning's float('inf')): Trainer::num_training_batches() during such a fit, until the ranks
/// agree where the epoch ends.
inline constexpr int64_t kUnknownLength = std::numeric_limits<int64_t>::max();

/// One pass over an IterableDataset's samples, in order. One thread reads it at a time.
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  /// The next sample (a Batch of its tensors without the batch dimension; the loader stacks
  /// batch_size of them), or nullopt at the stream's end.
  virtual std::optional<Batch> next() = 0;
  /// Passes over `count` samples, fewer at the end: reads and drops them. Override it where the
  /// source can move on without reading (a seek): each rank skips the other ranks' samples.
  virtual void skip(int64_t count);
  /// Where the stream is, for an exact resume (a file offset, a record number, ...); null when it
  /// cannot say. A stream without a state resumes by reading the samples before the position again
  /// and dropping them, which is exact when it gives the same samples every time it is opened for
  /// an epoch.
  virtual nlohmann::json state() const { return nullptr; }
  /// Goes to a position that state() returned, in a stream just opened for the same epoch.
  virtual void load_state(const nlohmann::json& state);
};

/// A source of samples of unknown length, read in order (Lightning's IterableDataset): a file or a
/// generator read as it goes. The loader shards it across ranks — rank r of W takes samples r,
/// r + W, r + 2W, ... — and batches it; the epoch ends where the first rank's share runs out, on
/// every rank at the same batch.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  /// The samples of `epoch`, from the first. Shuffle here, if at all, seeded with the epoch: every
  /// rank opens the stream and must see the same order.
  virtual std::unique_ptr<SampleStream> open(int64_t epoch) const = 0;
};

}  // namespace arc
