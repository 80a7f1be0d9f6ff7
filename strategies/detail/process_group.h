// Process groups over a c10d TCPStore: the rendezvous (every wait has a timeout and names the
// ranks that did not arrive), Gloo and NCCL collectives, and the choice of shared memory within
// a node.
// The c10d calls here are the same in LibTorch 1.13 and 2.x (differences go to base/detail/torch_compat).
#pragma once

#include <arc/base/detail/host.h>
#include <arc/strategies/collectives.h>

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace c10d {
class Store;
class TCPStore;
}  // namespace c10d

namespace arc {

/// Where and how to meet.
struct RendezvousOptions {
  std::string address = "127.0.0.1";
  int64_t port = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  /// How long the rendezvous and barriers (set-up, saves) may wait.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// How long a collective (all-reduce, broadcast, all-gather) may wait; unset: `timeout`.
  std::optional<std::chrono::milliseconds> collective_timeout;
  /// Ranks with the same node key share a host (host name and node rank).
  std::string node = "localhost";
  /// All-reduce through shared memory among the ranks of a node (Gloo across nodes).
  bool shared_memory = true;
  /// Shared-memory collectives on a helper thread (see ShmGroupOptions::helper_thread).
  bool shm_helper_thread = true;
  /// How long a rank waiting in a shared-memory collective, or for its helper thread, checks before
  /// it sleeps (see ShmGroupOptions::spin).
  std::optional<std::chrono::microseconds> shm_spin;
  /// CUDA tensors through NCCL (when LibTorch has it), CPU tensors through Gloo.
  bool nccl = false;
  /// The store at address:port is already open (torchrun's agent hosts it): rank 0 joins it too.
  bool store_hosted_elsewhere = false;
  /// Set by a launcher that watches the other ranks (ddp_spawn's rank 0): the rendezvous and
  /// barriers end at once when another rank failed, and a failed collective names that failure.
  PeerFailure peer_failure;
  /// Key prefix for this group in the store (in a store hosted elsewhere, followed by the generation:
  /// how many times this rank has joined it).
  std::string prefix = "arc";
};

/// A TCPStore server on `address`, port 0 = any free port (read it back with port()).
/// Opened before worker processes start, so their port can never be taken by someone else.
class StoreServer {
 public:
  StoreServer(const std::string& address, int64_t port, std::chrono::milliseconds timeout);
  ~StoreServer();
  int64_t port() const;
  c10::intrusive_ptr<c10d::TCPStore> store() const;

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

/// Fits the shared-memory collectives to the cores that the local ranks' compute threads leave: a
/// helper thread per rank only where each has a core of its own (one that takes turns with the
/// training threads, or sleeps between collectives, costs more than its overlap gains); a rank with
/// a core of its own waits for the others, and for its helper, up to a millisecond before it sleeps
/// (waking a sleeping thread costs 150 us and more on virtual machines, whose idle cores the host
/// takes back). `cores`: those this process may use.
void fit_shm_to_cores(RendezvousOptions& options, int64_t local_ranks, int64_t threads_per_rank,
                      int64_t cores = usable_cores());

/// Joins the group: rank 0 uses `hosted` (or hosts a store itself, unless it is hosted elsewhere),
/// other ranks connect; every rank checks in and waits for all others, and a timeout names the
/// missing ranks. Its collectives are numbered and named (TracedCollectives): one that fails says
/// where every rank was. Gloo, with shared memory within each node unless options.shared_memory is off,
/// or NCCL for CUDA tensors when options.nccl is on and LibTorch has it.
std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options,
                                              c10::intrusive_ptr<c10d::TCPStore> hosted);
/// The same, with rank 0 hosting its own store.
std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options);

/// The groups of a HYBRID_SHARD run, whose ranks are numbered node by node.
struct HybridGroups {
  /// make_collectives's group of every rank.
  std::unique_ptr<Collectives> world;
  /// The ranks of this node (each its local rank), among which sharded training divides the
  /// parameters: its reduce_scatter sums each share over every rank, within the node and then among
  /// the ranks of this local rank on every node (Marian's local sharding); its other collectives
  /// run within the node.
  std::unique_ptr<Collectives> shard;
};

/// Joins the group as make_collectives does, and makes HYBRID_SHARD's group of this rank's node
/// beside it; throws unless every node has `local_world_size` ranks, numbered node by node.
HybridGroups make_hybrid_collectives(const RendezvousOptions& options, c10::intrusive_ptr<c10d::TCPStore> hosted,
                                     int64_t local_rank, int64_t local_world_size);

/// Whether this build has c10d's NCCL process group: LibTorch with CUDA, and NCCL found at build time.
bool nccl_available();

}  // namespace arc
