// Optimizer state in checkpoints. LibTorch's SGD, Adam, AdamW, RMSprop and Adagrad are stored as
// raw tensors (read and written at file speed) with their options and step counts in the index;
// any other optimizer (LBFGS, a user's own) as one LibTorch archive.
#pragma once

#include <string>

namespace torch::optim {
class Optimizer;
}

namespace arc {

class CheckpointReader;
class CheckpointWriter;

/// Adds `optimizer`'s parameter groups and per-parameter state to `writer` under `name`.
void save_optimizer(CheckpointWriter& writer, const std::string& name, const torch::optim::Optimizer& optimizer);

/// Restores into `optimizer` what save_optimizer stored under `name` (or what format 2 stored: an
/// archive). Its parameter groups must have the sizes they had; the error names the difference.
void load_optimizer(const CheckpointReader& reader, const std::string& name, torch::optim::Optimizer& optimizer);

}  // namespace arc
