// Weights in and out: a module's parameters and buffers by name (PyTorch's state_dict), read from
// and written to files that other tools read and write. safetensors (one file, or Hugging Face's
// shards with model.safetensors.index.json) is read and written here to its specification; every
// file is checked whole before any tensor is read, so that a bad file is an error that changes
// nothing.
#pragma once

#include <arc/base/arg.h>

#include <torch/nn/module.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <memory>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace arc {

/// Tensors by name, in order, as PyTorch's state_dict.
using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;
/// A weights file's text metadata: name -> text.
using WeightsMetadata = std::map<std::string, std::string>;
/// A rename rule of load_weights: (ECMAScript regex, replacement).
using RenameRule = std::pair<std::string, std::string>;

/// One tensor that a weights file holds, as its header says, before anything is read.
struct WeightEntry {
  /// Its name in the file.
  std::string name;
  /// Its element type.
  torch::Dtype dtype = torch::kFloat;
  /// Its size in each dimension.
  std::vector<int64_t> shape;
};

/// A weights file opened for reading: its header checked against the file (types, shapes, offsets
/// inside the file, no overlaps, no duplicate names) before anything is read; each tensor is read
/// when asked for, once, straight into its destination where the types agree.
class WeightsReader {
 public:
  virtual ~WeightsReader() = default;
  /// The file's tensors, in the file's order.
  virtual const std::vector<WeightEntry>& entries() const = 0;
  /// Reads tensor `name` into `into`, which has its shape (converted to into's type and device).
  virtual void read_into(const std::string& name, const torch::Tensor& into) const = 0;
  /// The file's text metadata (safetensors' `__metadata__`), if any.
  virtual WeightsMetadata metadata() const { return {}; }
  /// Tensor `name` as a new CPU tensor of the file's type.
  torch::Tensor read(const std::string& name) const;
  /// The tensor of `entry` (one of entries()) as a new CPU tensor of the file's type.
  torch::Tensor read(const WeightEntry& entry) const;
  /// The entry `name`, or nullptr.
  const WeightEntry* find(const std::string& name) const;
};

/// Opens `path`: a `.safetensors` file, Hugging Face's `*.safetensors.index.json` with the shards it
/// names (in its folder), a file of Python's `torch.save(model.state_dict(), path)` (`.pt`, `.pth`,
/// `.bin`; read without Python, refusing anything but tensors, dicts, lists and plain values, as
/// `torch.load(weights_only=True)` does), a Lightning checkpoint (`.ckpt`: its "state_dict") or an
/// Arclight checkpoint (`.ckpt`: its module's tensors). An unknown suffix is an error naming those
/// taken.
std::unique_ptr<WeightsReader> open_weights(const std::string& path);

/// Every tensor of `path` (see open_weights), as CPU tensors of the file's types.
StateDict read_weights(const std::string& path);

/// How save_weights writes.
class SaveWeightsOptions {
  /// Text metadata (safetensors' `__metadata__`; "format": "pt" is added, as Hugging Face writes it).
  ARC_ARG(WeightsMetadata, metadata);
  /// The largest shard in MiB (0: one file): above it, safetensors are written as Hugging Face's
  /// shards, `<stem>-00001-of-0000N.safetensors` and `<stem>.safetensors.index.json` beside `path`.
  ARC_ARG(double, max_shard_mb) = 0;
  /// A Lightning checkpoint's (`.ckpt`) "epoch" and "global_step".
  ///@{
  ARC_ARG(int64_t, epoch) = 0;
  ARC_ARG(int64_t, global_step) = 0;
  ///@}
  /// A Lightning checkpoint's "hyper_parameters" (a JSON object; empty: none), which
  /// `load_from_checkpoint` passes to the module's `__init__`.
  ARC_ARG(nlohmann::json, hyper_parameters) = nlohmann::json::object();
};

/// Writes `state` to `path`, through a temporary file that is renamed into place when complete:
/// `.safetensors` (each tensor once); `.pt` (`.pth`, `.bin`) as Python's
/// `torch.save(model.state_dict())` writes it, which `torch.load(path, weights_only=True)` reads; or
/// `.ckpt` as Lightning's checkpoint (state_dict, epoch, global_step, hyper_parameters and its
/// version), which a LightningModule's `load_from_checkpoint` reads.
/// Returns the files written (the index last, when sharded).
std::vector<std::string> save_weights(const StateDict& state, const std::string& path,
                                      const SaveWeightsOptions& options = {});

/// `module`'s parameters, then its buffers, by name (PyTorch's state_dict).
StateDict state_dict(const torch::nn::Module& module);

/// Writes `module`'s state_dict (see above).
std::vector<std::string> save_weights(const torch::nn::Module& module, const std::string& path,
                                      const SaveWeightsOptions& options = {});

/// How load_weights maps a file's names onto a module's.
class LoadWeightsOptions {
  /// Every module tensor must be in the file and every file tensor in the module (after the
  /// renames and skips); off: those on one side only are left alone and reported.
  ARC_ARG(bool, strict) = true;
  /// Taken off the front of each file name that has it ("model." from Lightning's or HF's names).
  ARC_ARG(std::string, strip_prefix);
  /// Put in front of each file name, after strip_prefix ("backbone." to load into a submodule).
  ARC_ARG(std::string, add_prefix);
  /// (ECMAScript regex, replacement) pairs applied in turn to each name, after the prefixes
  /// (`{"encoder\\.layer\\.(\\d+)", "blocks.$1"}`).
  ARC_ARG(std::vector<RenameRule>, rename);
  /// Regexes of the file's own names to leave out ("classifier\\..*" for a new head).
  ARC_ARG(std::vector<std::string>, skip);
  /// Converts the module's floating-point parameters and buffers to this type first, as Hugging
  /// Face's torch_dtype does (unset: each tensor is converted to the module's type as it is).
  ARC_ARG(std::optional<torch::Dtype>, dtype);
};

/// What load_weights did, by the module's names.
struct WeightsReport {
  /// A tensor that the file and the module hold in different shapes.
  struct Mismatch {
    /// The module's name for it.
    std::string name;
    /// Its shape in the module and in the file.
    ///@{
    std::vector<int64_t> in_module, in_file;
    ///@}
  };
  /// The module's tensors that the file filled.
  std::vector<std::string> loaded;
  /// The module's tensors that the file does not hold (they keep their values).
  std::vector<std::string> missing;
  /// The file's tensors (renamed) that the module does not have.
  std::vector<std::string> unexpected;
  /// The file's tensors that `skip` left out, by the file's names.
  std::vector<std::string> skipped;
  /// The tensors whose shapes differ (nothing is loaded while there are any).
  std::vector<Mismatch> mismatched;
  /// One line per kind that is not empty: "loaded 4: fc1.weight, ...", "missing 1: ...".
  std::string summary() const;
};

/// Loads the weights of `path` (see open_weights) into `module`, mapping names as `options` say.
/// Everything is checked before anything is written: a shape mismatch (always, as in PyTorch), or
/// with `strict` a missing or unexpected tensor, is an arc::Error whose message is the report, and
/// the module is left as it was.
WeightsReport load_weights(torch::nn::Module& module, const std::string& path, const LoadWeightsOptions& options = {});

}  // namespace arc
