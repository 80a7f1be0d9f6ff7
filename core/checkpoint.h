// Checkpoint files. Layout (format 2): a 16-byte header (magic, format version), tensors stored
// raw at 64-byte boundaries, LibTorch archives (optimizer states) as blobs, then a JSON index
// (metadata; each entry's type, shape, offset, size and checksum) and a trailer that locates it.
// Written to a temporary name, fsynced and renamed, so a crash never leaves a half-written file;
// read through a memory map whose every checksum is verified before anything is loaded, so a bad
// file changes nothing and the error says what is wrong.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace arc {

/// The format this build writes and reads.
constexpr int64_t kCheckpointFormatVersion = 2;

/// What a checkpoint being written is called until it is complete: `<path>.tmp-<pid>`.
constexpr const char* kTemporaryInfix = ".tmp-";

/// Removes the temporary files in `folder` that writers which died (a crash, SIGKILL) left behind.
void remove_stale_temporaries(const std::string& folder);

/// The last.ckpt files that ckpt_path="last" chooses among: `folder`'s, and, when `versions_folder` is
/// given (checkpoints in the default <log_dir>/checkpoints), that of every version_*/checkpoints in it.
std::vector<std::string> last_checkpoints(const std::string& folder, const std::string& versions_folder);

/// Collects what one checkpoint holds, then writes it in one go.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(nlohmann::json meta) : meta_(std::move(meta)) {}
  /// A tensor, stored raw (copied to the CPU first when it lives elsewhere).
  void add(const std::string& name, const torch::Tensor& tensor);
  /// What only LibTorch knows how to serialize (optimizer states), as one blob.
  void add(const std::string& name, torch::serialize::OutputArchive archive);
  /// The parameters and buffers of `module`, as "model/<name>".
  void add_module(const torch::nn::Module& module);
  /// Writes through `path.tmp-<pid>`: write, fsync, rename, fsync the folder. A failed write is an
  /// arc::Error naming the file, the cause and the fix, and leaves no temporary file and the
  /// previous `path` intact. Temporary files of dead writers in that folder are removed first.
  void write(const std::string& path);

 private:
  nlohmann::json meta_;
  std::vector<std::pair<std::string, torch::Tensor>> tensors_;
  std::vector<std::pair<std::string, torch::serialize::OutputArchive>> archives_;
};

/// An opened, fully verified checkpoint. Missing, truncated, corrupt (a checksum differs) and
/// unknown-version files are arc::Errors that say which.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string path);
  ~CheckpointReader();
  /// The metadata of a complete checkpoint, without reading its data: header, trailer and index
  /// are checked (files are renamed into place only once written, so that means complete); the
  /// data checksums are left to the reader that loads it.
  static nlohmann::json read_meta(const std::string& path);
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  const nlohmann::json& meta() const { return meta_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  /// Copies tensor `name` into `into`, which must have its shape (converted to into's type and device).
  void read_into(const std::string& name, torch::Tensor& into) const;
  /// Tensor `name` as a new CPU tensor.
  torch::Tensor tensor(const std::string& name) const;
  /// The archive blob `name`.
  torch::serialize::InputArchive archive(const std::string& name) const;
  /// Loads "model/<name>" into `module` after checking that names and shapes match; the error
  /// lists what is missing, unexpected or of another shape.
  void load_module(torch::nn::Module& module) const;

 private:
  struct Entry {
    std::string kind;
    int64_t offset = 0;
    int64_t bytes = 0;
    torch::ScalarType dtype = torch::kFloat;
    std::vector<int64_t> shape;
  };
  CheckpointReader(std::string path, bool verify_data);
  const Entry& entry(const std::string& name, const std::string& kind) const;
  void map_file();
  void read_index();

  std::string path_;
  nlohmann::json meta_;
  std::map<std::string, Entry> entries_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool verify_data_ = true;
};

}  // namespace arc
