// arc::Batch: one type-erased batch of positional and named tensors, and of named parts (batches
// within the batch, one per source of a CombinedLoader).
#pragma once

#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// Positional tensors (`batch[0]`) and named ones (`batch["label"]`), moved together; a
/// CombinedLoader's batch holds one batch of each source as a part (`batch.part("labeled")[0]`).
class Batch {
 public:
  Batch() = default;
  /// A batch of these positional tensors, in order: `Batch{inputs, targets}`.
  ///@{
  Batch(std::initializer_list<torch::Tensor> tensors) : tensors_(tensors) {}
  explicit Batch(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {}
  ///@}

  /// Appends a positional tensor.
  Batch& add(torch::Tensor tensor);
  /// Sets (or replaces) the tensor called `name`.
  Batch& set(const std::string& name, torch::Tensor tensor);

  /// The positional tensor at `index`; an error past the last.
  ///@{
  torch::Tensor& operator[](size_t index);
  const torch::Tensor& operator[](size_t index) const;
  ///@}
  /// The tensor called `name`; an error naming the tensors there are when it is absent.
  ///@{
  torch::Tensor& operator[](const std::string& name);
  const torch::Tensor& operator[](const std::string& name) const;
  ///@}

  /// Whether there is a tensor called `name`.
  bool contains(const std::string& name) const;
  /// Number of positional tensors.
  size_t size() const { return tensors_.size(); }
  /// Whether the batch has no tensor and no part.
  bool empty() const { return tensors_.empty() && named_.empty() && parts_.empty(); }
  /// Samples in the batch: the first dimension of the first tensor, or of the first part's (0 when
  /// empty).
  int64_t batch_size() const;

  /// Sets (or replaces) the part called `name`.
  Batch& set_part(const std::string& name, Batch part);
  /// The part called `name`; an error naming the parts there are when it is absent.
  ///@{
  Batch& part(const std::string& name);
  const Batch& part(const std::string& name) const;
  ///@}
  /// Whether the part is there (under CombinedLoader's "max_size" a source that ran out has none).
  bool has_part(const std::string& name) const;
  /// The names of the parts, in the order they were set.
  const std::vector<std::string>& part_names() const { return part_names_; }

  /// A copy with every tensor on `device`; floating tensors also cast to `dtype` when given.
  /// `non_blocking`: copies from pinned memory to a GPU return before they finish (ordered on
  /// the current stream, as every later use of the tensors is).
  Batch to(torch::Device device, std::optional<torch::ScalarType> dtype = std::nullopt,
           bool non_blocking = false) const;
  /// A copy with every CPU tensor in page-locked memory (needs CUDA).
  Batch pin_memory() const;

  /// The positional tensors, in order.
  const std::vector<torch::Tensor>& tensors() const { return tensors_; }
  /// The named tensors with their names, in the order they were set.
  const std::vector<std::pair<std::string, torch::Tensor>>& named() const { return named_; }

 private:
  const torch::Tensor* find(const std::string& name) const;
  const Batch* find_part(const std::string& name) const;
  /// A batch of fn(tensor) for every tensor, the parts' too, names kept.
  Batch map(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const;

  std::vector<torch::Tensor> tensors_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  std::vector<std::string> part_names_;
  std::vector<Batch> parts_;
};

/// One batch of `samples` (each a Batch of one sample's tensors, without a batch dimension): each
/// positional and named tensor stacked along a new first dimension. The samples must have the same
/// tensors, with the same shapes.
Batch collate(const std::vector<Batch>& samples);

}  // namespace arc
