// GradReducer: DDP's gradient averaging. Parameters are grouped into buckets in reverse
// registration order (a small first bucket, then bucket_cap); autograd post-accumulation hooks
// mark parameters ready, a full bucket starts its all-reduce while backward goes on, and the
// end-of-backward callback waits and makes each gradient its averaged slot of the bucket (or copies
// the average back, with gradient_as_bucket_view off). The first bucket carries
// one more element, the ranks' vote to skip the step (TrainModule::training_step's undefined loss).
#pragma once

#include <arc/base/arg.h>
#include <arc/strategies/collectives.h>

#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace arc {

class Profiler;

/// How GradReducer buckets and reduces the gradients, as PyTorch's Reducer.
class ReducerOptions {
  /// The first bucket's size in bytes (small, so that communication starts early).
  ARC_ARG(int64_t, first_bucket_bytes) = 1 << 20;
  /// The other buckets' size in bytes.
  ARC_ARG(int64_t, bucket_bytes) = 25 << 20;
  /// Tolerate parameters that get no gradient in a backward (they are reduced as zeros).
  ARC_ARG(bool, find_unused_parameters) = false;
  /// Every backward uses the same parameters (PyTorch DDP's static_graph): the first backward
  /// learns which get no gradient, later ones reduce those as zeros from the start, so that their
  /// buckets all-reduce while backward runs instead of at its end; a change is an error.
  ARC_ARG(bool, static_graph) = false;
  /// Gradients become their bucket slots after the first reduction (PyTorch DDP's
  /// gradient_as_bucket_view): backward accumulates into the buckets, and neither the copy into
  /// them nor the copy of the average back is needed.
  ARC_ARG(bool, gradient_as_bucket_view) = true;
  /// Buckets where the group reduces them fastest (Collectives::reduce_buffer: under the
  /// shared-memory group, memory every rank of the node maps and reads a part of, which counts in
  /// each rank's resident memory); off: the rank's own memory, reduced through the group's slots.
  ARC_ARG(bool, shared_buckets) = true;
};

/// A reduction of gradients over the ranks after each backward (DDP's, sharded data parallel's).
class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  /// Arms the reduction for the next backward; without it (no_sync) gradients stay local. `profiler`
  /// (may be null) times that backward's collectives and the wait for their results.
  virtual void prepare_for_backward(Profiler* profiler = nullptr) = 0;
  /// Joins the ranks' reduction without a backward, as a rank whose batch was skipped: its
  /// current gradients (zeros where none) are reduced, with its vote to skip the step.
  virtual void reduce_without_backward(Profiler* profiler = nullptr) = 0;
  /// Whether some rank voted to skip in the last reduction.
  virtual bool skip_voted() const = 0;
};

/// Adds a post-accumulation hook to each parameter's gradient accumulator that calls ready(i) for
/// parameter i once its gradient of a backward is accumulated, while `alive` lives; returns the
/// accumulators, which the caller keeps.
std::vector<std::shared_ptr<torch::autograd::Node>> add_ready_hooks(const std::vector<torch::Tensor>& parameters,
                                                                    const std::shared_ptr<bool>& alive,
                                                                    std::function<void(size_t)> ready);

/// Averages the gradients of `parameters` over the ranks of `collectives`.
class GradReducer : public GradientReduction {
 public:
  /// `names[i]` names `parameters[i]` in errors.
  GradReducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names, Collectives& collectives,
              ReducerOptions options);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void prepare_for_backward(Profiler* profiler = nullptr) override;
  void reduce_without_backward(Profiler* profiler = nullptr) override;
  bool skip_voted() const override;
  /// Buckets of the last backward whose all-reduce waited for its end, held back by parameters
  /// without gradient (for tests and logs).
  size_t late_buckets() const { return late_buckets_; }
  /// Number of buckets, and the parameter indices of each (for tests and logs).
  const std::vector<std::vector<size_t>>& bucket_layout() const { return layout_; }

 private:
  struct Bucket;

  /// Every bucket waiting for all its parameters, the skip vote at 0.
  void reset(Profiler* profiler);
  /// Where parameter `parameter`'s gradient sits in its bucket.
  torch::Tensor slot(size_t parameter) const;
  /// The first byte of the parameter's slot.
  std::byte* slot_data(size_t parameter) const;
  /// Whether the parameter's gradient is its slot (gradient_as_bucket_view after a first step).
  bool grad_in_slot(size_t parameter) const;
  torch::Tensor slot_alias(size_t parameter) const;
  /// Copies the parameter's gradient into its slot.
  void copy_to_slot(size_t parameter);
  void mark_ready(size_t parameter);
  void launch_ready_buckets();
  void finalize();

  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;
  Collectives& collectives_;
  ReducerOptions options_;
  std::vector<std::vector<size_t>> layout_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  /// One element after the first bucket's gradients: a rank sets it to 1 to skip the step, so that
  /// the average is above 0 when some rank did.
  torch::Tensor skip_vote_;
  std::vector<bool> ready_;
  /// static_graph: whether the first backward ran, and the parameters it gave no gradient.
  bool graph_learned_ = false;
  std::vector<bool> unused_in_graph_;
  size_t late_buckets_ = 0;
  size_t next_bucket_ = 0;
  Profiler* profiler_ = nullptr;
  bool armed_ = false;
  bool finalize_queued_ = false;
  // Hooks outlive the reducer on the module's accumulators; they check this token first.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace arc
