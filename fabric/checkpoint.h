// Checkpoint files. Layout (format 3): a 16-byte header (magic, format version), tensors stored
// raw at 64-byte boundaries, LibTorch archives (the state of optimizers other than LibTorch's own)
// as blobs, then a JSON index (metadata; each entry's kind, shape, offset, size and checksum, or its
// JSON value) and a trailer that locates it. Format 2 stored every optimizer as an archive.
// Written to a temporary name, fsynced and renamed, so a crash never leaves a half-written file;
// every checksum is verified before anything is loaded, so a bad file changes nothing and the error
// says what is wrong. A sharded checkpoint is a folder of such files, one per rank, and an index
// (sharded_checkpoint.h); the reader opens either.
#pragma once

#include <arc/base/error.h>
#include <arc/base/output_file.h>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace arc {
class CheckpointReader;
namespace detail {
class ReadFile;
}  // namespace detail

namespace detail {
[[noreturn]] void fail_unreadable_checkpoint(const std::string& path, const std::exception& error);
}  // namespace detail

/// Runs `read` over the checkpoint at `path`. What JSON, LibTorch or the standard library throw
/// there, for a checkpoint whose checksums hold but which does not hold what Arclight writes (a key
/// missing, a value of another type, a generator state of another size), becomes an arc::Error that
/// names the file.
template <typename Read>
decltype(auto) reading_checkpoint(const std::string& path, Read&& read) {
  try {
    return read();
  } catch (const nlohmann::json::exception& error) {
    detail::fail_unreadable_checkpoint(path, error);
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the machine's limit, not the file's fault
  } catch (const c10::Error& error) {
    detail::fail_unreadable_checkpoint(path, error);
  } catch (const std::logic_error& error) {
    detail::fail_unreadable_checkpoint(path, error);
  }
}

/// The format this build writes, and the oldest it reads.
///@{
constexpr int64_t kCheckpointFormatVersion = 3;
constexpr int64_t kOldestReadableCheckpointFormat = 2;
///@}

/// Removes the temporary files in `folder` that writers which died (a crash, SIGKILL) left behind.
void remove_stale_temporaries(const std::string& folder);

/// Makes `link` a symbolic link to the checkpoint `target` (a file, or a sharded checkpoint's
/// folder), relative to the link's folder, replacing what `link` was in one step (ModelCheckpoint's
/// save_last "link").
void link_checkpoint(const std::string& target, const std::string& link);

/// The last.ckpt files that ckpt_path="last" chooses among: `folder`'s, and, when `versions_folder` is
/// given (checkpoints in the default `<log_dir>/checkpoints`), that of every version_*/checkpoints in it.
std::vector<std::string> last_checkpoints(const std::string& folder, const std::string& versions_folder);

/// `paths` by the time each file was last written, newest first (what "last", "best" of an earlier
/// run and an automatic resume look through).
std::vector<std::string> newest_first(std::vector<std::string> paths);

/// The names a non-strict load left alone (PyTorch's load_state_dict result).
struct LoadResult {
  /// The module's parameters and buffers the checkpoint does not hold (they keep their values).
  std::vector<std::string> missing_keys;
  /// What the checkpoint holds that the module does not have.
  std::vector<std::string> unexpected_keys;
};

/// A module's parameters, then its buffers, by name: what a checkpoint stores as "model/<name>".
std::vector<std::pair<std::string, torch::Tensor>> named_state(const torch::nn::Module& module);

/// Collects what one checkpoint holds, then writes it in one go.
class CheckpointWriter {
 public:
  /// A checkpoint with the metadata `meta` (epoch, step, callbacks' states, ...) and no entry yet.
  explicit CheckpointWriter(nlohmann::json meta) : meta_(std::move(meta)) {}
  /// A tensor, stored raw (read when the file is written, through the CPU when it lives elsewhere).
  void add(const std::string& name, const torch::Tensor& tensor);
  /// What only LibTorch knows how to serialize (optimizer states), as one blob (serialized now).
  void add(const std::string& name, torch::serialize::OutputArchive archive);
  /// A small JSON value kept in the index (an optimizer's layout).
  void add_json(const std::string& name, nlohmann::json value);
  /// Every entry of `reader` (a sharded checkpoint's too), to write them as one file.
  void add_entries(const CheckpointReader& reader);
  /// Removes the JSON value added as `name` and returns it (null when there is none).
  nlohmann::json take_json(const std::string& name);
  /// The parameters and buffers of `module`, as "<prefix>/<name>" ("model/<name>" in a Trainer's).
  void add_module(const torch::nn::Module& module, const std::string& prefix = "model");
  /// Puts `tensor` (of the same shape) in place of the one added as `name`.
  void replace(const std::string& name, const torch::Tensor& tensor);
  /// The threads write() uses: with `kTwo` (for saves that training waits for), large tensors are
  /// checksummed on a second thread while this one writes them; saves in the background use
  /// `kOne`, leaving training its core.
  enum class Threads { kOne, kTwo };
  /// Writes through `path.tmp-<pid>`: write, fsync, rename, fsync the folder. A failed write is an
  /// arc::Error naming the file, the cause and the fix, and leaves no temporary file and the
  /// previous `path` intact. Temporary files of dead writers in that folder are removed first,
  /// unless `remove_stale` is false (where ranks of other machines write into the same folder).
  void write(const std::string& path, Threads threads = Threads::kTwo, bool remove_stale = true) const;

  /// The metadata, which set_meta replaces.
  ///@{
  const nlohmann::json& meta() const { return meta_; }
  void set_meta(nlohmann::json meta) { meta_ = std::move(meta); }
  ///@}
  /// Copies every tensor into `buffer` (bytes, made larger when too small, else reused) and holds
  /// those copies instead, so that the originals may change while write() runs on another thread.
  void copy_tensors_to(torch::Tensor& buffer);
  /// Whether `other` holds the same entries, bit for bit (the metadata aside).
  bool same_data(const CheckpointWriter& other) const;

 private:
  nlohmann::json meta_;
  std::vector<std::pair<std::string, torch::Tensor>> tensors_;
  std::vector<std::pair<std::string, std::string>> archives_;
  nlohmann::json values_ = nlohmann::json::object();
};

/// An opened, fully verified checkpoint: one file, or a sharded checkpoint's folder, whose shards it
/// reads as one checkpoint. Missing, truncated, corrupt (a checksum differs) and unknown-version
/// files are arc::Errors that say which.
class CheckpointReader {
 public:
  /// Opens the checkpoint at `path` (a file or a sharded checkpoint's folder) and verifies all of
  /// it, data checksums included.
  explicit CheckpointReader(std::string path);
  ~CheckpointReader();
  /// The metadata of a complete checkpoint, without reading its data: header, trailer and index
  /// are checked (files are renamed into place only once written, so that means complete); the
  /// data checksums are left to the reader that loads it.
  static nlohmann::json read_meta(const std::string& path);
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  /// The file's path, as given.
  const std::string& path() const { return path_; }
  /// The metadata it was written with.
  const nlohmann::json& meta() const { return meta_; }
  /// Whether it holds an entry `name` (a tensor, an archive or a JSON value).
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  /// The names of the tensors it holds, sorted.
  std::vector<std::string> tensor_names() const;
  /// Whether it holds an entry "<prefix>/..." (a module's parameters, "model/..." in a Trainer's).
  bool holds_under(const std::string& prefix) const;
  /// Its entries' names up to their first '/', sorted, each once: "model", "optimizer_0", ...
  std::vector<std::string> top_names() const;
  /// Copies tensor `name` into `into`, which must have its shape (converted to into's type and device).
  void read_into(const std::string& name, const torch::Tensor& into) const;
  /// read_into for each (name, destination), every shape checked first; large reads are spread over
  /// as many threads as LibTorch's intra-op thread count.
  void read_all_into(const std::vector<std::pair<std::string, torch::Tensor>>& targets) const;
  /// Tensor `name` as a new CPU tensor.
  torch::Tensor tensor(const std::string& name) const;
  /// A new, unfilled CPU tensor of tensor `name`'s shape and type, to read it into.
  torch::Tensor empty_tensor(const std::string& name) const;
  /// Tensor `name`'s type and shape, from the index (nothing is read or allocated).
  std::pair<torch::ScalarType, std::vector<int64_t>> tensor_layout(const std::string& name) const;
  /// The archive blob `name`.
  torch::serialize::InputArchive archive(const std::string& name) const;
  /// Whether it holds `name` as an archive blob.
  bool holds_archive(const std::string& name) const { return contains(name) && entries_.at(name).kind == "archive"; }
  /// The JSON value `name`.
  const nlohmann::json& json(const std::string& name) const;
  /// Loads "<prefix>/<name>" into `module` after checking that names and shapes match; the error
  /// lists what is missing, unexpected or of another shape. Not `strict`: names on one side only are
  /// left alone and returned (shapes must still match, as in PyTorch's load_state_dict).
  LoadResult load_module(torch::nn::Module& module, bool strict = true, const std::string& prefix = "model") const;

 private:
  friend class CheckpointWriter;
  struct Entry {
    std::string kind;
    int64_t offset = 0;
    int64_t bytes = 0;
    torch::ScalarType dtype = torch::kFloat;
    std::vector<int64_t> shape;
    std::string checksum;
    nlohmann::json value;
    // The file that holds it: this reader's, or a shard's.
    const detail::ReadFile* file = nullptr;
  };
  CheckpointReader(std::string path, bool verify_data);
  const Entry& entry(const std::string& name, const std::string& kind) const;
  void open_file();
  /// Opens a sharded checkpoint's shards and takes their entries as its own.
  void open_shards();
  void read_index();
  void read_entry(const std::string& name, const nlohmann::json& json, uint64_t data_end);
  void verify_checksums();

  std::string path_;
  nlohmann::json meta_;
  std::map<std::string, Entry> entries_;
  std::unique_ptr<detail::ReadFile> file_;
  std::vector<std::unique_ptr<CheckpointReader>> shards_;
  bool verify_data_ = true;
};

}  // namespace arc
