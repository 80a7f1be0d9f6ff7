// Sharded data parallel over whole parameter tensors. Each parameter belongs to one rank, which
// alone keeps its averaged gradient and its optimizer state and steps it; the other ranks receive
// its new values after the step. Whole tensors, not slices, so that every rank's optimizer steps
// the very tensors that DDP's would and the bits come out the same.
#pragma once

#include <arc/strategies/collectives.h>
#include <arc/strategies/grad_reducer.h>
#include <arc/strategies/sharded_unit.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace arc {

/// Which rank owns each parameter, and the units in which gradients are reduced and parameters
/// gathered. Largest first, each parameter goes to the rank owning the fewest bytes so far. Units
/// take parameters in reverse registration order (the order in which backward produces their
/// gradients), one type each, until every rank owns at least 1/world_size of `first_unit_bytes` (the
/// first unit) or `unit_bytes` (the others) in the unit. A unit's gathered layout is world_size
/// shares of one length, share r holding rank r's parameters of the unit in unit order, then zeros.
class ShardLayout {
 public:
  /// A group of parameters gathered and reduced together.
  struct Unit {
    /// Parameter indices, in unit order.
    std::vector<size_t> parameters;
    /// Elements of each rank's share (the most any rank owns in the unit, plus the extra ones).
    int64_t share = 0;
    /// Elements each rank owns in the unit, by rank.
    std::vector<int64_t> owned;
  };

  /// `extra` elements more in every share of the first unit (the reducer's skip vote). `owners`, when
  /// given, names each parameter's rank instead (a layout of some of the parameters of another).
  ShardLayout(const std::vector<torch::Tensor>& parameters, int64_t world_size, int64_t rank, int64_t first_unit_bytes,
              int64_t unit_bytes, int64_t extra = 0, const std::vector<int64_t>& owners = {});

  /// The ranks the parameters are divided among, and this process's rank.
  ///@{
  int64_t world_size() const { return world_size_; }
  int64_t rank() const { return rank_; }
  ///@}
  /// The units, first reduced first.
  const std::vector<Unit>& units() const { return units_; }
  /// The rank owning parameter `p`, its unit, and where it starts in its owner's share.
  ///@{
  int64_t owner(size_t p) const { return owner_[p]; }
  size_t unit_of(size_t p) const { return unit_of_[p]; }
  int64_t offset(size_t p) const { return offset_[p]; }
  ///@}
  /// Whether this rank owns parameter `p`.
  bool owns(size_t p) const { return owner_[p] == rank_; }
  /// The index of `parameter` among the layout's parameters, if it is one of them.
  std::optional<size_t> index_of(const torch::Tensor& parameter) const;
  /// Parameter `p`'s place in its unit's gathered layout, `whole`, as a tensor of its shape.
  torch::Tensor place(size_t p, const torch::Tensor& whole) const;
  /// The elements of the parameters rank `r` owns.
  int64_t owned_numel(int64_t r) const { return owned_numel_[static_cast<size_t>(r)]; }
  /// The parameters, in the order they were given.
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

  /// Keeps the gathered layouts of the small units (up to 4 MiB each, 16 MiB in all) where `group`
  /// all-reduces fastest (Collectives::reduce_buffer: shared memory, reduced in place): for small
  /// models, a reduce-scatter's or gather's copies through the group's slots cost more than the bytes
  /// they save. Every rank calls it alike.
  void keep_small_units(Collectives& group);
  /// Unit `u`'s kept gathered layout (undefined where none is kept).
  torch::Tensor kept(size_t u) const;
  /// After an optimizer step on every rank: each owner's new values of its parameters to every rank,
  /// unit by unit: a kept unit by one all-reduce in place, another small one by one all_gather_into,
  /// a large one by broadcasts from each owner (large tensors in place, the others packed).
  void share_parameters(Collectives& group) const;
  /// Starts share_parameters' collectives for unit `u` alone; the work's wait() finishes them and
  /// gives every rank the values. The unit's parameters are the collectives' until then.
  PendingWork start_sharing(size_t u, Collectives& group) const;

 private:
  std::vector<torch::Tensor> parameters_;
  int64_t world_size_;
  int64_t rank_;
  std::vector<Unit> units_;
  std::vector<int64_t> owner_;
  std::vector<size_t> unit_of_;
  std::vector<int64_t> offset_;
  std::vector<int64_t> owned_numel_;
  std::unordered_map<const void*, size_t> index_;
  std::vector<torch::Tensor> kept_;
};

/// SHARD_GRAD_OP's gradient reduction: as GradReducer, autograd hooks mark parameters ready, and a
/// unit whose gradients are all there is reduce-scattered (in unit order on every rank), so that
/// each rank receives the average of the gradients it owns, bit for bit what DDP's all-reduce gives
/// them. The gradients of other ranks' parameters are freed as soon as they are copied into the
/// unit's transient buffer: a rank holds whole gradients only for units in flight (and for the
/// layout's kept units, which are all-reduced in place instead; all_reduce's share is reduce_scatter's
/// to the bit). The gradient of an
/// owned parameter is its slot in the rank's share of the unit, which holds what it owns and no
/// padding (gradient_as_bucket_view); the first unit's shares carry one element more, the ranks'
/// vote to skip the step.
class ShardedGradReducer : public GradientReduction {
 public:
  /// `layout` was made with one extra element (the skip vote); `names[i]` names its i-th parameter in
  /// errors.
  ShardedGradReducer(std::shared_ptr<const ShardLayout> layout, std::vector<std::string> names,
                     Collectives& collectives, ReducerOptions options);
  ~ShardedGradReducer() override;
  ShardedGradReducer(const ShardedGradReducer&) = delete;
  ShardedGradReducer& operator=(const ShardedGradReducer&) = delete;

  /// GradientReduction's: see there.
  ///@{
  void prepare_for_backward(Profiler* profiler = nullptr) override;
  void reduce_without_backward(Profiler* profiler = nullptr) override;
  bool skip_voted() const override;
  ///@}

 private:
  void reset(Profiler* profiler);
  torch::Tensor slot(size_t parameter) const;
  bool grad_in_slot(size_t parameter) const;
  torch::Tensor slot_alias(size_t parameter) const;
  /// Copies the parameter's gradient (zeros without one) into its unit's transient buffer and frees
  /// it unless this rank owns the parameter.
  void take_gradient(size_t parameter, bool zeros);
  torch::Tensor unit_buffer(size_t unit) const;
  void mark_ready(size_t parameter);
  void launch_ready_units();
  void finalize();

  std::shared_ptr<const ShardLayout> layout_;
  std::vector<std::string> names_;
  Collectives& collectives_;
  ReducerOptions options_;
  /// Per unit: this rank's share, kept; the gathered-layout buffer of a unit in flight; parameters
  /// still to come.
  std::vector<torch::Tensor> shares_;
  std::vector<torch::Tensor> wholes_;
  std::vector<size_t> pending_;
  std::vector<bool> ready_;
  size_t next_unit_ = 0;
  Profiler* profiler_ = nullptr;
  bool armed_ = false;
  bool finalize_queued_ = false;
  /// This rank's vote to skip, and the ranks' mean vote of the last reduction.
  double vote_ = 0;
  double votes_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

class UnitGather;

/// The order in which a model's FULL_SHARD units run their forwards, as each records itself at its
/// first, and the gathers it starts ahead (PyTorch FSDP's forward_prefetch and backward_prefetch):
/// as a unit's forward starts, the next unit's (`forward`); as a unit's backward starts
/// ("BACKWARD_PRE") or once it has its gradients ("BACKWARD_POST"), the previous unit's. A gather
/// started ahead runs while the unit computes where the collectives run apart from the calling
/// thread. Every rank's units must run in the same order, as their gathers must anyway.
class UnitOrder {
 public:
  /// `backward`: "BACKWARD_PRE", "BACKWARD_POST" or "NONE".
  UnitOrder(bool forward, std::string backward) : forward_(forward), backward_(std::move(backward)) {}
  /// Releases the units whose gather started ahead but that have not run since: a step is about to
  /// change the values they hold.
  void release_unused();

 private:
  friend class UnitGather;
  bool forward_;
  std::string backward_;
  /// The units by their first forward (null: destroyed since).
  std::vector<UnitGather*> units_;
};

/// FULL_SHARD's UnitSharding of one ShardedUnit: each owner keeps its parameters of the unit; the
/// others' have memory only from a gather to release() (for the unit's forward, and its backward
/// until the gradients of its parameters are accumulated or the backward ends).
class UnitGather : public UnitSharding {
 public:
  /// The unit's `parameters`, their owners among `world_size` ranks; whole when made. Each must
  /// have its memory to itself (a tensor of its own, not a view of another), as `names` name them.
  UnitGather(std::vector<torch::Tensor> parameters, const std::vector<std::string>& names,
             const std::vector<int64_t>& owners, int64_t world_size, int64_t rank, Collectives& group);
  ~UnitGather() override;
  UnitGather(const UnitGather&) = delete;
  UnitGather& operator=(const UnitGather&) = delete;

  /// UnitSharding's: see there.
  ///@{
  void gather() override;
  void gather_for_forward() override;
  void release() override;
  void gather_for_backward() override;
  ///@}
  /// Starts the gather without waiting for it (a collective: every rank calls it alike); gather()
  /// finishes it, release() waits for it and frees. Nothing where gathered or started already.
  void prefetch();
  /// Starts gathers ahead as `order` says, recording this unit in it at its first forward.
  void prefetch_with(std::shared_ptr<UnitOrder> order);
  /// Whether the other ranks' parameters have their memory and values now (a gather started ahead
  /// and not yet finished does not count).
  bool gathered() const { return gathered_ && !in_flight_.started(); }
  /// Whether a gather started by prefetch() is still to be finished.
  bool prefetching() const { return in_flight_.started(); }
  /// The unit's parameters and their owners.
  const ShardLayout& layout() const { return layout_; }

 private:
  void accumulated(size_t parameter);
  /// Releases at the end of the running backward.
  void release_after_backward();
  /// The unit before this one in the order, if any.
  UnitGather* previous() const;
  /// Starts the previous unit's gather if the order's backward prefetch is `when`.
  void prefetch_previous(const char* when);

  ShardLayout layout_;
  Collectives& group_;
  /// Indices of the parameters other ranks own.
  std::vector<size_t> foreign_;
  bool gathered_ = true;
  /// The gather that prefetch() started.
  PendingWork in_flight_;
  std::shared_ptr<UnitOrder> order_;
  /// This unit's place in order_ (-1: not run yet).
  int64_t place_ = -1;
  /// In a backward: the unit's parameters whose gradients are still to come, and whether a release
  /// at the backward's end is queued.
  std::vector<bool> pending_;
  size_t pending_count_ = 0;
  bool release_queued_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

}  // namespace arc
