// A process group whose ranks are threads of the test process (each maps shared memory on its own,
// as separate processes do), for collectives and reducers without starting processes.
#pragma once

#include <arc/strategies/detail/process_group.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace arc::testing {

/// How the thread ranks join.
struct Group {
  bool shared_memory = true;
  /// Each rank's node name (one node when empty).
  std::vector<std::string> nodes;
  std::chrono::milliseconds timeout = std::chrono::seconds(20);
  bool helper_thread = true;
  std::optional<std::chrono::milliseconds> collective_timeout = std::nullopt;
  std::optional<std::chrono::microseconds> spin = std::nullopt;
  /// Ranks per node, numbered node by node, for fn(rank, world, shard): HYBRID_SHARD's groups.
  int64_t ranks_per_node = 1;
};

/// Runs fn(rank, collectives) on `world` threads joined into one group, or fn(rank, world, shard)
/// with make_hybrid_collectives's groups; rethrows a rank's error.
template <typename Fn>
void on_ranks(int64_t world, const Group& group, Fn fn) {
  StoreServer server("127.0.0.1", 0, group.timeout);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        RendezvousOptions options;
        options.port = server.port();
        options.rank = r;
        options.world_size = world;
        options.timeout = group.timeout;
        options.collective_timeout = group.collective_timeout;
        options.shared_memory = group.shared_memory;
        options.shm_helper_thread = group.helper_thread;
        options.shm_spin = group.spin;
        options.node = group.nodes.empty() ? "one" : group.nodes[static_cast<size_t>(r)];
        const auto hosted = r == 0 ? server.store() : c10::intrusive_ptr<c10d::TCPStore>();
        if constexpr (std::is_invocable_v<Fn, int64_t, Collectives&, Collectives&>) {
          auto groups = make_hybrid_collectives(options, hosted, r % group.ranks_per_node, group.ranks_per_node);
          fn(r, *groups.world, *groups.shard);
        } else {
          auto collectives = make_collectives(options, hosted);
          fn(r, *collectives);
        }
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace arc::testing
