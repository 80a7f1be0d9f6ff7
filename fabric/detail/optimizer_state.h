// Optimizer state in checkpoints. LibTorch's SGD, Adam, AdamW, RMSprop and Adagrad are stored as
// raw tensors (read and written at file speed) with their options and step counts in the index;
// any other optimizer (LBFGS, a user's own) as one LibTorch archive.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace arc {

class CheckpointReader;
class CheckpointWriter;
class Collectives;

/// Adds `optimizer`'s parameter groups and per-parameter state to `writer` under `name`.
void save_optimizer(CheckpointWriter& writer, const std::string& name, const torch::optim::Optimizer& optimizer);

/// Restores into `optimizer` what save_optimizer stored under `name` (or what format 2 stored: an
/// archive). Its parameter groups must have the sizes they had; the error names the difference.
/// Under sharding (`owners` as for gather_optimizer_state), only the states of `rank` are kept, and
/// the others' are not read.
void load_optimizer(const CheckpointReader& reader, const std::string& name, torch::optim::Optimizer& optimizer,
                    const std::vector<int64_t>& owners = {}, int64_t rank = 0);

/// Under sharding (owners[i]: the rank keeping the state of `optimizer`'s i-th parameter, in group
/// order; -1: every rank), rank 0's optimizer receives the states other ranks keep, so that a
/// checkpoint written there is whole. Every rank calls it; a shipped optimizer type only.
void gather_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& owners, Collectives& group);

/// The layout save_optimizer stores for one optimizer, made whole from every rank's (`layouts`, in
/// rank order, each with the states its rank keeps and nulls for the others'), for a sharded
/// checkpoint's index. Layouts of other than a shipped optimizer type are an error.
nlohmann::json merge_optimizer_layouts(const std::vector<nlohmann::json>& layouts);

/// Drops the states that `owners` gives to ranks other than `rank` (after gather_optimizer_state's
/// save, or a load of a whole checkpoint).
void keep_own_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& owners, int64_t rank);

}  // namespace arc
