// Checkpoint files: one file per checkpoint, written to a temporary name, flushed and renamed so
// that a crash never leaves a half-written file; reading says exactly what is wrong with a bad one.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <nlohmann/json.hpp>

#include <string>

namespace torch::nn {
class Module;
}

namespace arc {

/// The format this build writes and reads.
constexpr int64_t kCheckpointFormatVersion = 1;

/// Writes `archive` to `path` through `path.tmp-<pid>`: save, fsync, rename, fsync the folder.
void write_atomically(torch::serialize::OutputArchive& archive, const std::string& path);

/// Opens the checkpoint at `path` and reads its metadata; missing, truncated, corrupt and
/// unknown-version files are arc::Errors that say which.
torch::serialize::InputArchive open_checkpoint(const std::string& path, nlohmann::json& meta);

/// Names and shapes of `module`'s parameters and buffers, as stored in the metadata.
nlohmann::json describe_state(const torch::nn::Module& module);

/// Checks that the checkpoint's parameters and buffers match `module` by name and shape; the
/// error lists what is missing, unexpected or of another shape.
void check_compatible(const nlohmann::json& meta, const torch::nn::Module& module, const std::string& path);

}  // namespace arc
