// Samplers give the order of dataset indices for an epoch; the loader shards it across ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace arc {

/// The global order of sample indices for one epoch, before sharding across ranks.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of a dataset of `dataset_size` samples in the order of `epoch` (from 0); every rank
  /// must compute the same.
  virtual std::vector<int64_t> order(int64_t dataset_size, int64_t epoch) const = 0;
};

/// 0, 1, 2, ...
class SequentialSampler : public Sampler {
 public:
  std::vector<int64_t> order(int64_t dataset_size, int64_t epoch) const override;
};

/// torch.randperm with a generator seeded `seed + epoch`, as torch's DistributedSampler does,
/// so `set_epoch` reshuffles and every rank computes the same order.
class RandomSampler : public Sampler {
 public:
  /// Orders seeded with `seed` (a shuffling loader gives its own seed).
  explicit RandomSampler(uint64_t seed = 0) : seed_(seed) {}
  std::vector<int64_t> order(int64_t dataset_size, int64_t epoch) const override;

 private:
  uint64_t seed_;
};

/// An order computed by a user function of (dataset size, epoch): custom samplers in one line.
class FunctionSampler : public Sampler {
 public:
  /// The order of (dataset size, epoch).
  using OrderFn = std::function<std::vector<int64_t>(int64_t, int64_t)>;
  /// Orders from `fn`; an index it returns outside the dataset is an error.
  explicit FunctionSampler(OrderFn fn) : fn_(std::move(fn)) {}
  std::vector<int64_t> order(int64_t dataset_size, int64_t epoch) const override;

 private:
  OrderFn fn_;
};

/// Rank `rank`'s share of `order`: elements rank, rank + world, ... After padding with the first
/// elements (`pad`) or dropping the tail so that every rank gets the same count.
std::vector<int64_t> shard(const std::vector<int64_t>& order, int64_t rank, int64_t world, bool pad);

}  // namespace arc
