// Collectives: the one small interface that the gradient reducer and user-facing collectives
// call, so that Gloo, NCCL or an intra-node shared-memory path can serve behind it.
#pragma once

#include <arc/base/error.h>
#include <arc/base/reduce.h>

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// The failure of another rank that a launcher in this process saw, waiting up to the given time
/// for one to be seen ("" while none was): a wait for the other ranks ends with it as its error.
using PeerFailure = std::function<std::string(std::chrono::milliseconds)>;

/// Throws the failure that `peer_failure` (when set) names, waiting up to `wait` for one.
inline void throw_peer_failure(const PeerFailure& peer_failure, std::chrono::milliseconds wait = {}) {
  if (!peer_failure) return;
  const auto failure = peer_failure(wait);
  if (!failure.empty()) throw Error(failure);
}

/// A collective in flight; wait() blocks until it completes and throws if it failed.
class PendingWork {
 public:
  /// Nothing in flight.
  PendingWork() = default;
  /// Work that `wait` waits for.
  explicit PendingWork(std::function<void()> wait) : wait_(std::move(wait)) {}
  /// Blocks until the work completes; throws if it failed.
  void wait();
  /// Whether there is work to wait for.
  bool started() const { return static_cast<bool>(wait_); }

 private:
  std::function<void()> wait_;
};

/// Names the collectives that this thread starts while it lives ("gradient bucket" 0, "signal
/// vote"), for the report of a collective that times out. `what` must outlive it (a literal).
class CollectiveName {
 public:
  /// Names the collectives "`what` `index`" (no index when -1) until it is destroyed.
  explicit CollectiveName(const char* what, int64_t index = -1);
  ~CollectiveName();
  CollectiveName(const CollectiveName&) = delete;
  CollectiveName& operator=(const CollectiveName&) = delete;
  /// The innermost name on this thread, e.g. "gradient bucket 0" ("" without one).
  static std::string current();

 private:
  const char* previous_what_;
  int64_t previous_index_;
};

/// Collectives over a fixed group of ranks. Every rank must call them in the same order.
class Collectives {
 public:
  virtual ~Collectives() = default;
  /// This process's rank in the group, and the group's size.
  ///@{
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  ///@}
  /// "gloo", "nccl", ...
  virtual std::string backend() const = 0;
  /// Starts an in-place reduction of `tensor` over ranks: sum, max, min, or mean (the sum divided
  /// by world_size() in the tensor's type; floating types only, see check_reduction).
  virtual PendingWork all_reduce(torch::Tensor tensor, Reduce op) = 0;
  /// A zeroed tensor of `numel` elements for repeated in-place all_reduce calls (DDP's gradient
  /// buckets), placed where this group reduces it fastest: the shared-memory group puts it in
  /// memory that every rank of the node maps, and reduces it there without copying. Every rank
  /// calls it, in the same order and with the same arguments. Default: an ordinary tensor.
  virtual torch::Tensor reduce_buffer(int64_t numel, const torch::TensorOptions& options);
  /// Whether all_reduce of a tensor with `options` runs apart from the calling thread, so that the
  /// caller's work goes on while it runs (Gloo's and NCCL's own threads do; the shared-memory
  /// group without a helper thread reduces within the call).
  virtual bool all_reduce_overlaps(const torch::TensorOptions& /*options*/) const { return true; }
  /// Starts overwriting `tensor` with rank `src`'s; `tensor` is the collective's until the work's
  /// wait() returns (a unit's parameters gathered ahead of its forward).
  virtual PendingWork start_broadcast(torch::Tensor tensor, int64_t src) = 0;
  /// Overwrites `tensor` with rank `src`'s.
  void broadcast(torch::Tensor tensor, int64_t src) { start_broadcast(std::move(tensor), src).wait(); }
  /// Every rank's `tensor`, in rank order.
  virtual std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) = 0;
  /// This rank's share of the reduction of `input` over ranks: with n = output.numel() and
  /// input.numel() = n * world_size() on every rank, rank r's `output` gets elements [r n, (r + 1) n)
  /// of what all_reduce(input, op) would give, bit for bit (sharded data parallel's gradients).
  /// Both tensors are contiguous, of one type and device (check_shares).
  /// Default: an all-reduce of a copy of `input`, this rank's share copied out.
  virtual void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op);
  /// Every rank's `input` (of one size on every rank), concatenated in rank order into `output`,
  /// which holds world_size() times as many elements (sharded parameters gathered whole).
  void all_gather_into(torch::Tensor output, const torch::Tensor& input) {
    start_all_gather_into(std::move(output), input).wait();
  }
  /// Starts all_gather_into; both tensors are the collective's until the work's wait() returns.
  /// Default: all_gather's, finished before it returns.
  virtual PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input);
  /// Waits until every rank got there.
  virtual void barrier() = 0;
  /// Seconds this process has spent blocked in the group's collectives so far (0: not counted), so
  /// that a step's own work can be told from its waiting for the other ranks.
  virtual double blocked_seconds() const { return 0.0; }
};

/// Throws unless `tensor` can hold the result of `op`: a mean needs a floating type.
void check_reduction(const torch::Tensor& tensor, Reduce op);

/// Throws unless `whole` holds `group.world_size()` times the elements of `share`, of the same
/// type and device, both contiguous: the shapes of reduce_scatter (`what`) and all_gather_into.
void check_shares(const Collectives& group, const torch::Tensor& share, const torch::Tensor& whole, const char* what);

/// `text` as rank `src` of `group` has it (its length, then its bytes); every rank calls it.
std::string broadcast_text(Collectives& group, const std::string& text, int64_t src);

/// Every rank's `text`, in rank order (the lengths, then the bytes padded to the longest); every
/// rank calls it.
std::vector<std::string> all_gather_text(Collectives& group, const std::string& text);

}  // namespace arc
