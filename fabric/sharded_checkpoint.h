// Sharded checkpoints: a folder holding one checkpoint file per rank, which every rank writes at
// once, and an index naming them. A save completes when the index is renamed into place, so a
// folder always holds one complete set: the new one, or, after a crash, the one before.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace arc {

class CheckpointWriter;
class Collectives;
class Strategy;

/// The file in a sharded checkpoint's folder that names its shards.
constexpr const char* kShardedIndexName = "index.json";

/// What a sharded checkpoint's index holds.
struct ShardedCheckpointIndex {
  /// The checkpoint's metadata (epoch, step, callbacks' states, ...).
  nlohmann::json meta;
  /// The shard files, in rank order, as paths.
  std::vector<std::string> shards;
};

/// Every rank of `group` calls it with the entries it owns in `shard` (rank 0's also holds the
/// metadata and everything not sharded): the folder `path` is created, each rank writes its file in
/// parallel, and once all are complete rank 0 writes the index and removes the set they replace.
/// A failure on any rank is an arc::Error on every rank that names the rank and the cause, and
/// leaves the previous set in place.
void write_sharded_checkpoint(const CheckpointWriter& shard, const std::string& path, Collectives& group);

/// Adds the parameters of `module` that `strategy` gives this rank, as "<prefix>/<name>"; rank 0's
/// shard also takes the buffers and the parameters no rank owns. Under HYBRID_SHARD the first
/// node's ranks write what they own, and the other nodes' ranks nothing of it (they hold replicas).
void add_owned_state(CheckpointWriter& shard, const torch::nn::Module& module, const std::string& prefix,
                     const Strategy& strategy);

/// Adds the state of `optimizer` that this rank keeps, as `name` (as add_owned_state, the first
/// node's ranks under HYBRID_SHARD); rank 0's shard also takes its layout, made whole from every rank's. Every rank
/// calls it, in the same order.
void add_owned_optimizer(CheckpointWriter& shard, const std::string& name, const torch::optim::Optimizer& optimizer,
                         Strategy& strategy);

/// Reads the index of the sharded checkpoint in `folder`; a missing or unreadable index, or a
/// missing shard, is an arc::Error that says which.
ShardedCheckpointIndex read_sharded_index(const std::string& folder);

/// Removes a checkpoint: a file, or a sharded checkpoint's folder (its index first, so that a
/// removal cut short never leaves a set that reads as complete).
void remove_checkpoint(const std::string& path);

/// Writes the checkpoint at `from` (a sharded one's folder, or a file) as one checkpoint file at `to`,
/// which resumes and loads as `from` does, at any world size.
void consolidate_checkpoint(const std::string& from, const std::string& to);

}  // namespace arc
