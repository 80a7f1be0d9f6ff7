// safetensors, read and written to its specification: an 8-byte little-endian header length, a JSON
// header ({name: {dtype, shape, data_offsets}}, an optional "__metadata__" of strings) padded with
// spaces to 8 bytes, then the tensors' bytes, each entry's data_offsets relative to their start,
// together covering them without holes or overlaps. Hugging Face's sharded form adds an index,
// {"metadata": {"total_size": ...}, "weight_map": {name: shard file}}.
#include <arc/fabric/weights.h>

#include <arc/base/error.h>
#include <arc/base/output_file.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/read_file.h>
#include <arc/fabric/detail/torch_load.h>
#include <arc/fabric/detail/torch_save.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors are little-endian, as this host must be");

namespace arc {
namespace {

// The header's size limit (the reference implementation's), checked before it is read.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kSuffix = ".safetensors";
constexpr size_t kWritePiece = 1 << 20;
constexpr const char* kIndexSuffix = ".safetensors.index.json";
// The Lightning release whose checkpoint layout a .ckpt is written in (its "pytorch-lightning_version").
constexpr const char* kLightningVersion = "2.2.5";

const std::vector<std::pair<std::string, torch::Dtype>>& dtype_names() {
  static const std::vector<std::pair<std::string, torch::Dtype>> names = {
      {"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
      {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
      {"U8", torch::kByte},    {"BOOL", torch::kBool}};
  return names;
}

std::string dtype_name(torch::Dtype dtype, const std::string& tensor) {
  for (const auto& [name, type] : dtype_names())
    if (type == dtype) return name;
  ARC_FAIL("tensor '", tensor, "' has type ", c10::toString(dtype), ", which safetensors cannot hold; convert it ",
           "to one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL first");
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Finds the first key that an object of a JSON text names twice (nlohmann keeps the last one
// silently), by a SAX pass that builds nothing: the parser's callback form rescans each object's
// parent at its end, which is quadratic in a header of many tensors.
struct DuplicateKeys : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  bool start_object(std::size_t) override {
    keys.emplace_back();
    return true;
  }
  bool key(string_t& name) override {
    if (!keys.back().insert(name).second && duplicate.empty()) duplicate = name;
    return true;
  }
  bool end_object() override {
    keys.pop_back();
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

// A JSON text parsed with every object's keys checked for duplicates; `what` names the file in
// errors.
nlohmann::json parse_unique(const std::string& text, const std::string& what) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ARC_CHECK(!json.is_discarded(), what,
            " has a header that is not JSON; it is not a safetensors file, or it is corrupt");
  DuplicateKeys keys;
  nlohmann::json::sax_parse(text, &keys);
  ARC_CHECK(keys.duplicate.empty(), what, " names '", keys.duplicate, "' twice; the file is corrupt");
  return json;
}

// One safetensors file.
class SafetensorsReader : public WeightsReader {
 public:
  explicit SafetensorsReader(const std::string& path) : file_(path, "weights file", "check the file system") {
    const std::string what = "safetensors file '" + path + "'";
    ARC_CHECK(file_.size() >= 8, what, " is ", file_.size(), " bytes long, shorter than its 8-byte header length; ",
              "it is truncated or not a safetensors file");
    uint64_t header_bytes = 0;
    file_.read_at(0, &header_bytes, 8);
    ARC_CHECK(header_bytes <= file_.size() - 8, what, " declares a ", header_bytes, "-byte header, but holds ",
              file_.size() - 8, " bytes after its length; it is truncated or not a safetensors file");
    ARC_CHECK(header_bytes <= kMaxHeaderBytes, what, " declares a ", header_bytes, "-byte header, more than the ",
              kMaxHeaderBytes, " bytes safetensors allows; it is not a safetensors file");
    std::string header(header_bytes, '\0');
    file_.read_at(8, header.data(), header.size());
    data_start_ = 8 + header_bytes;
    read_header(parse_unique(header, what), what);
  }

  const std::vector<WeightEntry>& entries() const override { return entries_; }
  std::map<std::string, std::string> metadata() const override { return metadata_; }

  void read_into(const std::string& name, const torch::Tensor& into) const override {
    const auto found = spans_.find(name);
    ARC_CHECK(found != spans_.end(), "safetensors file '", file_.path(), "' holds no tensor '", name, "'");
    const auto& [entry, offset] = found->second;
    ARC_CHECK(into.sizes().vec() == entry->shape, "tensor '", name, "' of '", file_.path(), "' has shape ",
              c10::IntArrayRef(entry->shape), ", the destination ", into.sizes(),
              "; read it into a tensor of its shape");
    const bool direct = into.device().is_cpu() && into.scalar_type() == entry->dtype && into.is_contiguous();
    const auto target = direct ? into : torch::empty(entry->shape, torch::TensorOptions().dtype(entry->dtype));
    file_.read_at(data_start_ + offset, target.data_ptr(), target.nbytes());
    if (!direct) {
      torch::NoGradGuard no_grad;
      into.copy_(target);
    }
  }

 private:
  void read_header(const nlohmann::json& header, const std::string& what) {
    ARC_CHECK(header.is_object(), what, " has a header that is not a JSON object; it is not a safetensors file");
    struct Span {
      uint64_t begin, end;
      std::string name;
    };
    std::vector<Span> spans;
    for (const auto& [name, value] : header.items()) {
      const std::string entry = what + ", entry '" + name + "'";
      if (name == "__metadata__") {
        ARC_CHECK(value.is_object(), entry, " must be an object of strings, got ", value.dump());
        for (const auto& [key, text] : value.items()) {
          ARC_CHECK(text.is_string(), entry, " must map names to strings; '", key, "' is ", text.dump());
          metadata_[key] = text.get<std::string>();
        }
        continue;
      }
      ARC_CHECK(value.is_object() && value.size() == 3 && value.contains("dtype") && value.contains("shape") &&
                    value.contains("data_offsets"),
                entry, " must be {dtype, shape, data_offsets}, got ", value.dump());
      const auto& dtype = value["dtype"];
      const auto known = std::find_if(dtype_names().begin(), dtype_names().end(),
                                      [&](const auto& pair) { return dtype.is_string() && dtype == pair.first; });
      ARC_CHECK(known != dtype_names().end(), entry, " has dtype ", dtype.dump(),
                ", which Arclight does not read; it reads F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL");
      WeightEntry out{name, known->second, {}};
      ARC_CHECK(value["shape"].is_array(), entry, " has a shape that is not a list: ", value["shape"].dump());
      for (const auto& dim : value["shape"]) {
        ARC_CHECK(dim.is_number_unsigned() || (dim.is_number_integer() && dim.get<int64_t>() >= 0), entry,
                  " has a shape that is not a list of sizes >= 0: ", value["shape"].dump());
        out.shape.push_back(dim.get<int64_t>());
      }
      const auto& offsets = value["data_offsets"];
      ARC_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                    offsets[1].is_number_unsigned() && offsets[0].get<uint64_t>() <= offsets[1].get<uint64_t>(),
                entry, " has data_offsets ", offsets.dump(), "; they must be [begin, end] with begin <= end");
      const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
      const auto bytes = detail::byte_size(out.shape, c10::elementSize(out.dtype));
      ARC_CHECK(bytes && *bytes == end - begin, entry, " has shape ", value["shape"].dump(), " of ", dtype.dump(),
                " but data_offsets ", offsets.dump(), " of ", end - begin, " bytes; the file is corrupt");
      ARC_CHECK(end <= file_.size() - data_start_, entry, " has data_offsets ", offsets.dump(), " past the end of ",
                "its ", file_.size() - data_start_, " bytes of data; the file is truncated or corrupt");
      spans.push_back({begin, end, name});
      entries_.push_back(std::move(out));
    }
    // The data in file order, each tensor where the one before ends, the last at the file's end.
    std::vector<size_t> order(spans.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::tie(spans[a].begin, spans[a].end) < std::tie(spans[b].begin, spans[b].end);
    });
    uint64_t at = 0;
    std::vector<WeightEntry> in_order;
    for (const size_t i : order) {
      ARC_CHECK(spans[i].begin == at, what, ", entry '", spans[i].name, "' starts at byte ", spans[i].begin,
                " of the data, but the entries before it end at ", at,
                spans[i].begin < at ? "; they overlap: the file is corrupt" : "; the file has a hole: it is corrupt");
      at = spans[i].end;
      in_order.push_back(entries_[i]);
    }
    ARC_CHECK(at == file_.size() - data_start_, what, " has ", file_.size() - data_start_ - at,
              " bytes after its last tensor; the file is corrupt");
    entries_ = std::move(in_order);
    for (size_t k = 0; k < order.size(); ++k)
      spans_.emplace(entries_[k].name, std::make_pair(&entries_[k], spans[order[k]].begin));
  }

  detail::ReadFile file_;
  uint64_t data_start_ = 0;
  std::vector<WeightEntry> entries_;
  std::map<std::string, std::pair<const WeightEntry*, uint64_t>> spans_;
  std::map<std::string, std::string> metadata_;
};

// Hugging Face's shards: the index's weight_map names each tensor's file, in the index's folder.
class ShardedReader : public WeightsReader {
 public:
  explicit ShardedReader(const std::string& index_path) {
    std::ifstream in(index_path);
    ARC_CHECK(in.good(), "cannot open weights index '", index_path, "' (", std::strerror(errno),
              "); check the path and its permissions");
    std::stringstream text;
    text << in.rdbuf();
    const std::string what = "weights index '" + index_path + "'";
    const auto index = parse_unique(text.str(), what);
    ARC_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), what,
              " must be {\"metadata\": {...}, \"weight_map\": {name: file}}; it has no weight_map object");
    const auto folder = std::filesystem::path(index_path).parent_path();
    std::map<std::string, std::string> file_of;
    for (const auto& [name, file] : index["weight_map"].items()) {
      ARC_CHECK(file.is_string() && !file.get<std::string>().empty() &&
                    file.get<std::string>().find('/') == std::string::npos,
                what, " maps '", name, "' to ", file.dump(), "; it must be a file name in the index's folder");
      file_of[name] = file.get<std::string>();
    }
    std::set<std::string> files;
    for (const auto& [name, file] : file_of) files.insert(file);
    for (const auto& file : files) {
      const auto path = (folder / file).string();
      shards_.push_back(std::make_unique<SafetensorsReader>(path));
      for (const auto& entry : shards_.back()->entries()) {
        const auto listed = file_of.find(entry.name);
        ARC_CHECK(listed != file_of.end() && listed->second == file, what, " does not list tensor '", entry.name,
                  "' of shard '", path, "'", listed == file_of.end() ? "" : " (it names " + listed->second + ")",
                  "; the index and its shards do not match");
        shard_of_[entry.name] = shards_.back().get();
        entries_.push_back(entry);
      }
    }
    for (const auto& [name, file] : file_of)
      ARC_CHECK(shard_of_.count(name) == 1, what, " maps '", name, "' to '", file, "', which does not hold it; ",
                "the index and its shards do not match");
  }

  const std::vector<WeightEntry>& entries() const override { return entries_; }
  std::map<std::string, std::string> metadata() const override {
    return shards_.empty() ? std::map<std::string, std::string>() : shards_.front()->metadata();
  }
  void read_into(const std::string& name, const torch::Tensor& into) const override {
    const auto found = shard_of_.find(name);
    ARC_CHECK(found != shard_of_.end(), "the sharded weights hold no tensor '", name, "'");
    found->second->read_into(name, into);
  }

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> shards_;
  std::map<std::string, const SafetensorsReader*> shard_of_;
  std::vector<WeightEntry> entries_;
};

// One safetensors file of `state`'s tensors (contiguous CPU tensors) at `path`.
void write_safetensors(const StateDict& state, const std::string& path,
                       const std::map<std::string, std::string>& metadata) {
  // Keys in name order (an ordered_json finds each key by a linear search): the data's order is
  // the offsets', as the specification has it.
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : state) {
    const uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", dtype_name(tensor.scalar_type(), name)},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  OutputFile file(path, "weights file", "the path given to save_weights");
  file.write(&length, 8);
  file.write(text.data(), text.size());
  // In pieces, as the checkpoint writer does, so that the disk starts on each as the next goes in.
  for (const auto& [name, tensor] : state) {
    const auto* bytes = static_cast<const char*>(tensor.data_ptr());
    for (size_t at = 0; at < tensor.nbytes(); at += kWritePiece)
      file.write(bytes + at, std::min(kWritePiece, tensor.nbytes() - at));
  }
  file.commit();
}

// The module of an Arclight checkpoint: its "model/<name>" tensors, the whole file verified first.
class CheckpointWeights : public WeightsReader {
 public:
  explicit CheckpointWeights(const std::string& path) : reader_(path) {
    for (const auto& name : reader_.tensor_names()) {
      if (name.rfind(kModelPrefix, 0) != 0) continue;
      auto [dtype, shape] = reader_.tensor_layout(name);
      entries_.push_back({name.substr(std::strlen(kModelPrefix)), dtype, std::move(shape)});
    }
    ARC_CHECK(!entries_.empty(), "checkpoint '", path, "' holds no module weights (no ", kModelPrefix,
              " entries); it was saved by something other than a Trainer or Fabric's save of a module");
  }
  const std::vector<WeightEntry>& entries() const override { return entries_; }
  WeightsMetadata metadata() const override {
    WeightsMetadata out;
    for (const char* key : {"epoch", "global_step"})
      if (reader_.meta().contains(key)) out[key] = reader_.meta()[key].dump();
    const auto hparams = reader_.meta().value("hparams", nlohmann::json::object());
    if (!hparams.empty()) out["hparams"] = hparams.dump();
    return out;
  }
  void read_into(const std::string& name, const torch::Tensor& into) const override {
    reader_.read_into(kModelPrefix + name, into);
  }

 private:
  static constexpr const char* kModelPrefix = "model/";
  CheckpointReader reader_;
  std::vector<WeightEntry> entries_;
};

// Whether `path` names a file of torch.save's by its suffix.
bool is_torch_save(const std::string& path) {
  return ends_with(path, ".pt") || ends_with(path, ".pth") || ends_with(path, ".bin");
}

// Whether `path` begins with a zip archive's signature, as PyTorch's torch.save files and
// Lightning's checkpoints do (an error if it cannot be read).
bool is_zip(const std::string& path) {
  const detail::ReadFile file(path, "weights file", "check the file system");
  char start[4] = {};
  if (file.size() >= 4) file.read_at(0, start, 4);
  return std::memcmp(start, "PK\x03\x04", 4) == 0;
}

}  // namespace

torch::Tensor WeightsReader::read(const std::string& name) const {
  const auto* entry = find(name);
  ARC_CHECK(entry != nullptr, "the weights hold no tensor '", name, "'");
  return read(*entry);
}

torch::Tensor WeightsReader::read(const WeightEntry& entry) const {
  auto out = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
  read_into(entry.name, out);
  return out;
}

const WeightEntry* WeightsReader::find(const std::string& name) const {
  for (const auto& entry : entries())
    if (entry.name == name) return &entry;
  return nullptr;
}

std::unique_ptr<WeightsReader> open_weights(const std::string& path) {
  if (ends_with(path, kIndexSuffix)) return std::make_unique<ShardedReader>(path);
  if (ends_with(path, kSuffix)) return std::make_unique<SafetensorsReader>(path);
  if (is_torch_save(path)) {
    ARC_CHECK(is_zip(path), "'", path, "' is not a zip archive, as torch.save writes since PyTorch 1.6: it is in ",
              "the legacy format (_use_new_zipfile_serialization=False) or not a PyTorch file; save it again with ",
              "torch.save");
    return detail::open_torch_file(path);
  }
  // Lightning's checkpoints are torch.save's zip archives; Arclight's are not.
  if (ends_with(path, ".ckpt"))
    return !std::filesystem::is_directory(path) && is_zip(path) ? detail::open_torch_file(path)
                                                                : std::make_unique<CheckpointWeights>(path);
  ARC_FAIL("cannot tell the format of weights file '", path, "' by its name; Arclight reads ", kSuffix,
           " files, Hugging Face's sharded ", kIndexSuffix, ", torch.save's .pt (.pth, .bin), Lightning's and ",
           "Arclight's checkpoints (.ckpt)");
}

StateDict read_weights(const std::string& path) {
  const auto reader = open_weights(path);
  StateDict out;
  for (const auto& entry : reader->entries()) out.emplace_back(entry.name, reader->read(entry));
  return out;
}

// What a checkpoint stores under "model/" is the state_dict too.
StateDict state_dict(const torch::nn::Module& module) { return named_state(module); }

namespace {

// `json` as the Python value it reads as: dicts, lists, str, int, float, bool and None.
c10::IValue python_value(const nlohmann::json& json) {
  if (json.is_object()) {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    for (const auto& [key, value] : json.items()) dict.insert(key, python_value(value));
    return dict;
  }
  if (json.is_array()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const auto& value : json) list.push_back(python_value(value));
    return list;
  }
  if (json.is_string()) return json.get<std::string>();
  if (json.is_boolean()) return json.get<bool>();
  if (json.is_number_unsigned()) {
    ARC_CHECK(json.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
              "SaveWeightsOptions::hyper_parameters holds ", json.dump(), ", larger than a checkpoint's integers ",
              "(64-bit signed) hold; give it as a float or a string");
    return json.get<int64_t>();
  }
  if (json.is_number_integer()) return json.get<int64_t>();
  if (json.is_number()) return json.get<double>();
  return {};
}

// `state` as torch.save(state_dict) writes it (a dict of name -> tensor), or with `lightning` as
// Lightning's checkpoint of a module with that state_dict.
void write_torch_save(const StateDict& state, const std::string& path, const SaveWeightsOptions& options,
                      bool lightning) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : state) dict.insert(name, tensor.detach().to(torch::kCPU).contiguous());
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  if (lightning) {
    ARC_CHECK(options.hyper_parameters().is_object(), "SaveWeightsOptions::hyper_parameters must be a JSON object ",
              "(name -> value), as Lightning's module takes them; got ", options.hyper_parameters().dump());
    checkpoint.insert("epoch", options.epoch());
    checkpoint.insert("global_step", options.global_step());
    checkpoint.insert("pytorch-lightning_version", kLightningVersion);
    checkpoint.insert("state_dict", dict);
    if (!options.hyper_parameters().empty())
      checkpoint.insert("hyper_parameters", python_value(options.hyper_parameters()));
  }
  OutputFile file(path, "weights file", "the path given to save_weights");
  detail::torch_save(lightning ? c10::IValue(checkpoint) : c10::IValue(dict), file);
  file.commit();
}

}  // namespace

std::vector<std::string> save_weights(const StateDict& state, const std::string& path,
                                      const SaveWeightsOptions& options) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : state)
    ARC_CHECK(names.insert(name).second, "cannot save weights to '", path, "': tensor name '", name,
              "' comes twice; give each tensor a name of its own");
  const bool lightning = ends_with(path, ".ckpt");
  if (is_torch_save(path) || lightning) {
    ARC_CHECK(options.max_shard_mb() == 0, "cannot save weights to '", path, "': max_shard_mb shards ", kSuffix,
              " files only; write <name>", kSuffix, " to shard them");
    write_torch_save(state, path, options, lightning);
    return {path};
  }
  ARC_CHECK(ends_with(path, kSuffix), "cannot save weights to '", path, "': Arclight writes ", kSuffix,
            " files, PyTorch's .pt (.pth, .bin) and Lightning's .ckpt; name the file <name>", kSuffix, ", <name>.pt ",
            "or <name>.ckpt");
  ARC_CHECK(options.max_shard_mb() >= 0, "max_shard_mb must be >= 0 (0: one file), got ", options.max_shard_mb());
  auto metadata = options.metadata();
  metadata.emplace("format", "pt");
  StateDict contiguous;
  uint64_t total = 0;
  for (const auto& [name, tensor] : state) {
    contiguous.emplace_back(name, tensor.detach().to(torch::kCPU).contiguous());
    total += contiguous.back().second.nbytes();
  }
  const auto limit = static_cast<uint64_t>(options.max_shard_mb() * (1 << 20));
  if (limit == 0 || total <= limit) {
    write_safetensors(contiguous, path, metadata);
    return {path};
  }
  // Shards filled in order up to the limit (a larger tensor is a shard of its own).
  std::vector<StateDict> shards(1);
  uint64_t in_shard = 0;
  for (auto& item : contiguous) {
    const uint64_t bytes = item.second.nbytes();
    if (!shards.back().empty() && in_shard + bytes > limit) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(std::move(item));
    in_shard += bytes;
  }
  const std::filesystem::path target(path);
  const std::string stem = target.filename().string().substr(0, target.filename().string().size() - 12);
  const auto numbered = [&](size_t i) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu-of-%05zu", i + 1, shards.size());
    return stem + name + kSuffix;
  };
  std::vector<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();  // by name, as write_safetensors' header
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto file = numbered(i);
    written.push_back((target.parent_path() / file).string());
    write_safetensors(shards[i], written.back(), metadata);
    for (const auto& [name, tensor] : shards[i]) weight_map[name] = file;
  }
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  written.push_back((target.parent_path() / (stem + kIndexSuffix)).string());
  OutputFile file(written.back(), "weights index", "the path given to save_weights");
  file.write(text.data(), text.size());
  file.commit();
  return written;
}

std::vector<std::string> save_weights(const torch::nn::Module& module, const std::string& path,
                                      const SaveWeightsOptions& options) {
  return save_weights(state_dict(module), path, options);
}

std::string WeightsReport::summary() const {
  const auto names = [](const std::vector<std::string>& list) {
    std::string out;
    for (size_t i = 0; i < list.size() && i < 10; ++i) out += (i == 0 ? "" : ", ") + list[i];
    if (list.size() > 10) out += ", ... (" + std::to_string(list.size() - 10) + " more)";
    return out;
  };
  std::ostringstream out;
  const auto line = [&](const char* kind, const std::vector<std::string>& list) {
    if (!list.empty()) out << kind << " " << list.size() << ": " << names(list) << "\n";
  };
  line("loaded", loaded);
  line("missing", missing);
  line("unexpected", unexpected);
  line("skipped", skipped);
  for (const auto& m : mismatched)
    out << "shape mismatch: " << m.name << " is " << c10::IntArrayRef(m.in_module) << " in the module, "
        << c10::IntArrayRef(m.in_file) << " in the file\n";
  return out.str();
}

WeightsReport load_weights(torch::nn::Module& module, const std::string& path, const LoadWeightsOptions& options) {
  const auto reader = open_weights(path);
  const auto regex_of = [](const std::string& pattern, const char* option) {
    try {
      return std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& error) {
      ARC_FAIL("LoadWeightsOptions::", option, " has the pattern '", pattern, "', which is not a regex (", error.what(),
               ")");
    }
  };
  std::vector<std::pair<std::regex, std::string>> renames;
  for (const auto& [pattern, replacement] : options.rename())
    renames.emplace_back(regex_of(pattern, "rename"), replacement);
  std::vector<std::regex> skips;
  for (const auto& pattern : options.skip()) skips.push_back(regex_of(pattern, "skip"));

  const auto state = state_dict(module);
  std::map<std::string, torch::Tensor> targets(state.begin(), state.end());
  WeightsReport report;
  std::vector<std::pair<std::string, torch::Tensor>> reads;  // file name, destination
  std::map<std::string, std::string> source_of;              // module name -> file name
  for (const auto& entry : reader->entries()) {
    if (std::any_of(skips.begin(), skips.end(), [&](const std::regex& r) { return std::regex_match(entry.name, r); })) {
      report.skipped.push_back(entry.name);
      continue;
    }
    std::string name = entry.name;
    if (!options.strip_prefix().empty() && name.rfind(options.strip_prefix(), 0) == 0)
      name.erase(0, options.strip_prefix().size());
    name = options.add_prefix() + name;
    for (const auto& [pattern, replacement] : renames) name = std::regex_replace(name, pattern, replacement);
    const auto [earlier, first] = source_of.emplace(name, entry.name);
    ARC_CHECK(first, "cannot load weights '", path, "': its tensors '", earlier->second, "' and '", entry.name,
              "' both become '", name, "' after the renames; change the rename rules or skip one");
    const auto target = targets.find(name);
    if (target == targets.end()) {
      report.unexpected.push_back(name);
    } else if (target->second.sizes().vec() != entry.shape) {
      report.mismatched.push_back({name, target->second.sizes().vec(), entry.shape});
    } else {
      report.loaded.push_back(name);
      reads.emplace_back(entry.name, target->second);
    }
  }
  for (const auto& [name, tensor] : state)
    if (source_of.count(name) == 0) report.missing.push_back(name);
  const bool refused =
      !report.mismatched.empty() || (options.strict() && (!report.missing.empty() || !report.unexpected.empty()));
  ARC_CHECK(!refused, "cannot load weights '", path, "' into the module (nothing was changed):\n", report.summary(),
            report.mismatched.empty()
                ? "map the names with LoadWeightsOptions' strip_prefix, add_prefix or rename, leave tensors out "
                  "with skip, or load what matches with strict(false)"
                : "leave those tensors out with LoadWeightsOptions::skip (a new head), or build the module in the "
                  "file's shapes");
  // The module's own tensors change type in place (set_data), so `reads` holds them still.
  if (options.dtype()) {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : state)
      if (tensor.is_floating_point()) tensor.set_data(tensor.to(*options.dtype()));
  }
  for (const auto& [file_name, into] : reads) reader->read_into(file_name, into);
  return report;
}

}  // namespace arc
