// arc::Batch: one type-erased batch of positional and named tensors.
#pragma once

#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// Positional tensors (`batch[0]`) and named ones (`batch["label"]`), moved together.
class Batch {
 public:
  Batch() = default;
  Batch(std::initializer_list<torch::Tensor> tensors) : tensors_(tensors) {}
  explicit Batch(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {}

  /// Appends a positional tensor.
  Batch& add(torch::Tensor tensor);
  /// Sets (or replaces) the tensor called `name`.
  Batch& set(const std::string& name, torch::Tensor tensor);

  torch::Tensor& operator[](size_t index);
  const torch::Tensor& operator[](size_t index) const;
  torch::Tensor& operator[](const std::string& name);
  const torch::Tensor& operator[](const std::string& name) const;

  bool contains(const std::string& name) const;
  /// Number of positional tensors.
  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty() && named_.empty(); }
  /// Samples in the batch: the first dimension of the first tensor (0 when empty).
  int64_t batch_size() const;

  /// A copy with every tensor on `device`; floating tensors also cast to `dtype` when given.
  /// `non_blocking`: copies from pinned memory to a GPU return before they finish (ordered on
  /// the current stream, as every later use of the tensors is).
  Batch to(torch::Device device, std::optional<torch::ScalarType> dtype = std::nullopt,
           bool non_blocking = false) const;
  /// A copy with every CPU tensor in page-locked memory (needs CUDA).
  Batch pin_memory() const;

  const std::vector<torch::Tensor>& tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, torch::Tensor>>& named() const { return named_; }

 private:
  const torch::Tensor* find(const std::string& name) const;
  /// A batch of fn(tensor) for every tensor, names kept.
  Batch map(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const;

  std::vector<torch::Tensor> tensors_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
};

/// One batch of `samples` (each a Batch of one sample's tensors, without a batch dimension): each
/// positional and named tensor stacked along a new first dimension. The samples must have the same
/// tensors, with the same shapes.
Batch collate(const std::vector<Batch>& samples);

}  // namespace arc
