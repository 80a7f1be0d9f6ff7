// Collectives for ranks that share a host: all-reduce, broadcast, all-gather and barrier through
// one POSIX shared-memory segment per node; across nodes a hierarchical all-reduce (within the
// node through shared memory, then Gloo among the node leaders, then back through shared memory)
// and reduce-scatter (within the node, then each share among the ranks of one local rank).
#pragma once

#include <arc/strategies/collectives.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace c10d {
class Store;
}

namespace arc {

struct ShmGroupOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  /// Ranks with the same node key share a segment (host name and node rank).
  std::string node;
  /// How long a collective waits for the other ranks (collective_timeout).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// How long set-up and barriers wait (timeout).
  std::chrono::milliseconds barrier_timeout{std::chrono::minutes(30)};
  /// Bytes per rank and step; larger tensors go in several steps.
  int64_t slot_bytes = 4 << 20;
  /// Collectives run on a helper thread, so that all-reduces overlap backward; off, they run on
  /// the calling thread, which is faster when no core is left for the helper.
  bool helper_thread = true;
  /// How long a rank waiting for another checks before it sleeps (unset: ShmSegment's 20 us), and,
  /// with a helper thread, how long the helper waits for the next collective and the caller for the
  /// helper's result before they sleep (unset: not at all); see fit_shm_to_cores for when DDP sets it.
  std::optional<std::chrono::microseconds> spin;
};

/// Makes a group called `name` in the store for ranks `rank` of `size` (the node leaders).
using GroupFactory = std::function<std::unique_ptr<Collectives>(const std::string& name, int64_t rank, int64_t size)>;

/// Wraps `global` (which keeps serving CUDA tensors, and everything but all-reduce across
/// nodes). Returns `global` itself when no two ranks share a node.
std::unique_ptr<Collectives> make_shm_collectives(c10d::Store& store, const ShmGroupOptions& options,
                                                  std::unique_ptr<Collectives> global,
                                                  const GroupFactory& make_leaders);

}  // namespace arc
