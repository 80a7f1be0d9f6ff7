// The seed inputs of every fuzz target, written from real files: a Trainer's checkpoint, weights
// saved in each format, the example configs and what --print_config resolves from them, command
// lines, and each launcher's variables.
#pragma once

#include <string>

namespace arc::fuzz {

/// Writes `<folder>/<target>/<seed>` for each target; `source_dir` is the source tree (for its configs).
void write_seeds(const std::string& folder, const std::string& source_dir);

}  // namespace arc::fuzz
