// Checkpoint files: the writer streams each blob through its checksum to the file in pieces
// that are still in cache; the reader checks the trailer, version, index and every checksum first.
#include <arc/fabric/checkpoint.h>

#include <arc/base/console.h>
#include <arc/base/detail/crc32c.h>
#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>
#include <arc/base/output_file.h>
#include <arc/fabric/detail/read_file.h>
#include <arc/fabric/sharded_checkpoint.h>

#include <torch/torch.h>

#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <set>

namespace arc {
namespace {

constexpr char kMagic[8] = {'A', 'R', 'C', 'C', 'K', 'P', 'T', '\0'};
constexpr char kTrailerMagic[8] = {'A', 'R', 'C', 'C', 'K', 'E', 'N', 'D'};
constexpr size_t kHeaderBytes = 16;
// index offset, index bytes, index crc32c (4) + 4 spare, magic.
constexpr size_t kTrailerBytes = 32;
// Write pieces: checksummed, then written while still in L2.
constexpr size_t kPiece = 1 << 20;
// A blob of this size or more is worth a second thread's checksum when written, and reads of this
// many bytes or more are worth more threads.
constexpr size_t kWorthAThread = 8 << 20;
// Read pieces: summed while still in L2.
constexpr size_t kReadPiece = 256 << 10;
// Load pieces, a thread's share of the checksums and of the reading into tensors.
constexpr size_t kLoadPiece = 4 << 20;

// Runs job(0) .. job(count - 1), each index once, on this thread and, where `bytes` make it worth
// starting threads, on up to LibTorch's intra-op thread count less one more. (at::parallel_for would
// run them all on this thread: its OpenMP loop is compiled into the caller, and Arclight is built
// without OpenMP.) The first error is rethrown once every thread has stopped.
void spread(size_t count, size_t bytes, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < count; i = next++) job(i);
  };
  const size_t threads = bytes < kWorthAThread ? 1 : static_cast<size_t>(std::max(1, at::get_num_threads()));
  std::vector<std::future<void>> helpers;
  for (size_t h = 1; h < std::min(threads, count); ++h) helpers.push_back(std::async(std::launch::async, work));
  std::exception_ptr error;
  try {
    work();
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& helper : helpers) try {
      helper.get();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  if (error) std::rethrow_exception(error);
}

// Zeros up to the next multiple of `alignment`.
void pad_to(OutputFile& file, size_t alignment) {
  static const char zeros[64] = {};
  file.write(zeros, (alignment - file.offset() % alignment) % alignment);
}

// Checksums and writes `size` bytes. Summing takes about a third of the time that copying into the
// page cache does, so with two threads a large blob is summed on the second while this one writes it.
std::string write_blob(OutputFile& file, const void* data, size_t size, CheckpointWriter::Threads threads) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::future<std::string> aside;
  if (threads == CheckpointWriter::Threads::kTwo && size >= kWorthAThread)
    aside = std::async(std::launch::async, [bytes, size] {
      BlobChecksum sum;
      sum.update(bytes, size);
      return sum.hex();
    });
  BlobChecksum checksum;
  for (size_t at = 0; at < size; at += kPiece) {
    const size_t n = std::min(kPiece, size - at);
    if (!aside.valid()) checksum.update(bytes + at, n);
    file.write(bytes + at, n);
  }
  return aside.valid() ? aside.get() : checksum.hex();
}

torch::ScalarType scalar_type_named(const std::string& name, const std::string& path) {
  for (const auto type :
       {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kLong, torch::kInt, torch::kShort,
        torch::kChar, torch::kByte, torch::kBool, torch::kComplexFloat, torch::kComplexDouble})
    if (name == c10::toString(type)) return type;
  ARC_FAIL("checkpoint '", path, "' holds a tensor of unknown type '", name, "'; it is corrupt or from a newer build");
}

std::string shape_text(const std::vector<int64_t>& shape) { return nlohmann::json(shape).dump(); }

uint64_t read_u64(const uint8_t* at) {
  uint64_t value;
  std::memcpy(&value, at, 8);
  return value;
}

}  // namespace

namespace detail {
void fail_unreadable_checkpoint(const std::string& path, const std::exception& error) {
  ARC_FAIL("checkpoint '", path, "' does not hold what Arclight writes (", message_of(error),
           "); it is corrupt or was written by another program: use an earlier one");
}
}  // namespace detail

void CheckpointWriter::add(const std::string& name, const torch::Tensor& tensor) {
  tensors_.emplace_back(name, tensor.detach());
}

// LibTorch's archive writer must not see a failing sink (it would throw from its destructor and end
// the process), so archives go to memory, and only our writes can fail.
void CheckpointWriter::add(const std::string& name, torch::serialize::OutputArchive archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  archives_.emplace_back(name, std::move(bytes));
}

void CheckpointWriter::add_json(const std::string& name, nlohmann::json value) { values_[name] = std::move(value); }

void CheckpointWriter::add_entries(const CheckpointReader& reader) {
  for (const auto& [name, e] : reader.entries_) {
    if (e.kind == "tensor") {
      tensors_.emplace_back(name, reader.tensor(name));
    } else if (e.kind == "archive") {
      std::string bytes(static_cast<size_t>(e.bytes), '\0');
      e.file->read_at(static_cast<uint64_t>(e.offset), bytes.data(), bytes.size());
      archives_.emplace_back(name, std::move(bytes));
    } else {
      values_[name] = e.value;
    }
  }
}

nlohmann::json CheckpointWriter::take_json(const std::string& name) {
  const auto found = values_.find(name);
  if (found == values_.end()) return nullptr;
  auto value = std::move(*found);
  values_.erase(found);
  return value;
}

std::vector<std::pair<std::string, torch::Tensor>> named_state(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& item : module.named_parameters()) state.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
}

void CheckpointWriter::replace(const std::string& name, const torch::Tensor& tensor) {
  for (auto& [added, value] : tensors_) {
    if (added != name) continue;
    ARC_CHECK(value.sizes() == tensor.sizes(), "checkpoint entry '", name, "' has shape ", value.sizes(),
              "; its replacement has ", tensor.sizes(), ". A callback's on_save_checkpoint must put in tensors of ",
              "the shapes it replaces");
    value = tensor.detach();
    return;
  }
  ARC_FAIL("checkpoint entry '", name, "' was not added, so nothing can replace it; replace \"model/<name>\" ",
           "entries of the module's parameters and buffers, or add() entries of your own");
}

void CheckpointWriter::add_module(const torch::nn::Module& module, const std::string& prefix) {
  for (const auto& [name, tensor] : named_state(module)) add(prefix + "/" + name, tensor);
}

void CheckpointWriter::copy_tensors_to(torch::Tensor& buffer) {
  const auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  int64_t total = 0;
  for (const auto& entry : tensors_) total += aligned(static_cast<int64_t>(entry.second.nbytes()));
  if (!buffer.defined() || buffer.numel() < total) buffer = torch::empty({total}, torch::kByte);
  auto* at = buffer.data_ptr<uint8_t>();
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : tensors_) {
    auto copy = torch::from_blob(at, tensor.sizes(), torch::TensorOptions().dtype(tensor.scalar_type()));
    copy.copy_(tensor);
    tensor = copy;
    at += aligned(static_cast<int64_t>(tensor.nbytes()));
  }
}

bool CheckpointWriter::same_data(const CheckpointWriter& other) const {
  if (tensors_.size() != other.tensors_.size() || archives_ != other.archives_ || values_ != other.values_)
    return false;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& [name, mine] = tensors_[i];
    const auto& [other_name, theirs] = other.tensors_[i];
    if (name != other_name || mine.scalar_type() != theirs.scalar_type() || mine.sizes() != theirs.sizes())
      return false;
    const auto a = mine.to(torch::kCPU).contiguous(), b = theirs.to(torch::kCPU).contiguous();
    if (std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) != 0) return false;
  }
  return true;
}

void CheckpointWriter::write(const std::string& path, Threads threads, bool remove_stale) const {
  const std::filesystem::path target(path);
  const std::string folder = target.has_parent_path() ? target.parent_path().string() : ".";
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  ARC_CHECK(!error, "cannot create the folder of checkpoint '", path, "': ", error.message(),
            "; make its parent writable, or save elsewhere (ModelCheckpoint's dirpath, default_root_dir)");
  ARC_CHECK(!std::filesystem::is_directory(path), "cannot write checkpoint '", path, "': a sharded checkpoint (a ",
            "folder) has that name; remove it, save elsewhere, or keep the strategy's state_dict_type \"sharded\"");
  if (remove_stale) remove_stale_temporaries(folder);
  OutputFile file(path, "checkpoint", "ModelCheckpoint's dirpath, default_root_dir",
                  "save smaller checkpoints (save_weights_only)");
  const uint64_t version = kCheckpointFormatVersion;
  file.write(kMagic, 8);
  file.write(&version, 8);
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [name, stored] : tensors_) {
    const auto tensor = stored.to(torch::kCPU).contiguous();
    pad_to(file, 64);
    const auto offset = file.offset();
    const auto checksum = write_blob(file, tensor.data_ptr(), tensor.nbytes(), threads);
    entries[name] = {{"kind", "tensor"},
                     {"offset", offset},
                     {"bytes", tensor.nbytes()},
                     {"checksum", checksum},
                     {"dtype", c10::toString(tensor.scalar_type())},
                     {"shape", tensor.sizes().vec()}};
  }
  for (const auto& [name, bytes] : archives_) {
    pad_to(file, 64);
    const auto offset = file.offset();
    entries[name] = {{"kind", "archive"},
                     {"offset", offset},
                     {"bytes", bytes.size()},
                     {"checksum", write_blob(file, bytes.data(), bytes.size(), threads)}};
  }
  for (const auto& [name, value] : values_.items()) entries[name] = {{"kind", "json"}, {"value", value}};
  const std::string index = nlohmann::json{{"meta", meta_}, {"entries", entries}}.dump();
  const uint64_t index_offset = file.offset(), index_bytes = index.size();
  file.write(index.data(), index.size());
  const uint32_t index_crc[2] = {crc32c(index.data(), index.size()), 0};
  file.write(&index_offset, 8);
  file.write(&index_bytes, 8);
  file.write(index_crc, 8);
  file.write(kTrailerMagic, 8);
  file.commit();
  sync_folder(folder);
}

void link_checkpoint(const std::string& target, const std::string& link) {
  namespace fs = std::filesystem;
  const auto relative = fs::path(target).lexically_relative(fs::path(link).parent_path());
  const std::string temporary = link + kTemporaryInfix + std::to_string(::getpid());
  std::error_code error;
  fs::remove(temporary, error);
  fs::create_symlink(relative.empty() ? fs::path(target) : relative, temporary, error);
  // A sharded last.ckpt is a folder, which a rename cannot replace.
  if (!error && fs::is_directory(fs::symlink_status(link))) remove_checkpoint(link);
  if (!error) fs::rename(temporary, link, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error("cannot make '" + link + "' a link to checkpoint '" + target + "': " + error.message() +
                "; make the folder writable, or set ModelCheckpoint's save_last to true for a copy");
  }
}

std::vector<std::string> last_checkpoints(const std::string& folder, const std::string& versions_folder) {
  std::vector<std::string> out;
  if (std::filesystem::exists(folder + "/last.ckpt")) out.push_back(folder + "/last.ckpt");
  if (versions_folder.empty()) return out;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(versions_folder, ignored))
    if (std::filesystem::exists(entry.path() / "checkpoints" / "last.ckpt"))
      out.push_back((entry.path() / "checkpoints" / "last.ckpt").string());
  return out;
}

std::vector<std::string> newest_first(std::vector<std::string> paths) {
  std::vector<std::pair<std::filesystem::file_time_type, std::string>> timed;
  std::error_code missing;
  for (auto& path : paths) timed.emplace_back(std::filesystem::last_write_time(path, missing), std::move(path));
  std::sort(timed.rbegin(), timed.rend());
  std::vector<std::string> out;
  for (auto& [time, path] : timed) out.push_back(std::move(path));
  return out;
}

void remove_stale_temporaries(const std::string& folder) {
  std::error_code error;
  for (std::filesystem::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const auto at = name.rfind(kTemporaryInfix);
    if (at == std::string::npos) continue;
    const std::string pid_text = name.substr(at + std::strlen(kTemporaryInfix));
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    // A writer that is still alive (this process, another run's) keeps its file.
    const pid_t pid = static_cast<pid_t>(std::stoll(pid_text));
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    std::filesystem::remove(it->path(), ignored);
  }
}

CheckpointReader::CheckpointReader(std::string path) : CheckpointReader(std::move(path), true) {}

CheckpointReader::CheckpointReader(std::string path, bool verify_data)
    : path_(std::move(path)), verify_data_(verify_data) {
  if (std::filesystem::is_directory(path_)) {
    open_shards();
    return;
  }
  open_file();
  read_index();
  if (verify_data_) verify_checksums();
}

CheckpointReader::~CheckpointReader() = default;

nlohmann::json CheckpointReader::read_meta(const std::string& path) { return CheckpointReader(path, false).meta_; }

void CheckpointReader::open_file() {
  ARC_CHECK(std::filesystem::exists(path_), "checkpoint '", path_, "' does not exist; check ckpt_path");
  file_ = std::make_unique<detail::ReadFile>(path_, "checkpoint", "check the file system, or use an earlier one");
  ARC_CHECK(file_->size() >= kHeaderBytes + kTrailerBytes, "checkpoint '", path_, "' is truncated (", file_->size(),
            " bytes); use an earlier one");
}

void CheckpointReader::open_shards() {
  auto index = read_sharded_index(path_);
  meta_ = std::move(index.meta);
  for (const auto& shard : index.shards) {
    shards_.push_back(std::unique_ptr<CheckpointReader>(new CheckpointReader(shard, verify_data_)));
    for (auto& [name, e] : shards_.back()->entries_) {
      ARC_CHECK(entries_.count(name) == 0, "sharded checkpoint '", path_, "' is corrupt: '", name, "' is in two ",
                "shards; use an earlier one");
      entries_.emplace(name, std::move(e));
    }
  }
}

// Every data checksum, before anything is loaded. Blobs are summed in pieces of kLoadPiece spread
// over threads (so that one large tensor is not summed on one), each read in parts small enough to
// be summed in cache; a blob's pieces are joined in order.
void CheckpointReader::verify_checksums() {
  struct Piece {
    size_t blob;
    uint64_t offset;  // in the file
    size_t size;
  };
  std::vector<const std::pair<const std::string, Entry>*> blobs;
  std::vector<Piece> pieces;
  size_t bytes = 0;
  for (const auto& item : entries_) {
    if (item.second.kind == "json") continue;
    const auto size = static_cast<size_t>(item.second.bytes);
    for (size_t at = 0; at < size; at += kLoadPiece)
      pieces.push_back({blobs.size(), static_cast<uint64_t>(item.second.offset) + at, std::min(kLoadPiece, size - at)});
    blobs.push_back(&item);
    bytes += size;
  }
  std::vector<BlobChecksum> sums(pieces.size());
  spread(pieces.size(), bytes, [&](size_t i) {
    const auto& piece = pieces[i];
    std::vector<uint8_t> part(std::min(kReadPiece, piece.size));
    for (size_t at = 0; at < piece.size; at += kReadPiece) {
      const size_t n = std::min(kReadPiece, piece.size - at);
      file_->read_at(piece.offset + at, part.data(), n);
      sums[i].update(part.data(), n);
    }
  });
  std::vector<BlobChecksum> joined(blobs.size());
  for (size_t i = 0; i < pieces.size(); ++i) joined[pieces[i].blob].append(sums[i]);
  for (size_t b = 0; b < blobs.size(); ++b)
    ARC_CHECK(joined[b].hex() == blobs[b]->second.checksum, "checkpoint '", path_, "' is corrupt: '", blobs[b]->first,
              "' fails its checksum (the file changed after it was written); use an earlier one");
}

void CheckpointReader::read_index() {
  uint8_t header[kHeaderBytes], trailer[kTrailerBytes];
  file_->read_at(0, header, kHeaderBytes);
  file_->read_at(file_->size() - kTrailerBytes, trailer, kTrailerBytes);
  ARC_CHECK(std::memcmp(header, kMagic, 8) == 0, "file '", path_,
            "' is not an Arclight checkpoint, or is truncated or corrupt; pass a file written by ",
            "Trainer::save_checkpoint");
  const auto version = static_cast<int64_t>(read_u64(header + 8));
  ARC_CHECK(version >= kOldestReadableCheckpointFormat && version <= kCheckpointFormatVersion, "checkpoint '", path_,
            "' has format version ", version, ", but this Arclight reads versions ", kOldestReadableCheckpointFormat,
            " to ", kCheckpointFormatVersion, "; load it with the Arclight that wrote it, or retrain");
  const uint64_t index_offset = read_u64(trailer), index_bytes = read_u64(trailer + 8);
  // Each bound on its own, so that no sum of the file's numbers can wrap around.
  ARC_CHECK(std::memcmp(trailer + 24, kTrailerMagic, 8) == 0 && index_offset >= kHeaderBytes &&
                index_offset <= file_->size() - kTrailerBytes &&
                index_bytes == file_->size() - kTrailerBytes - index_offset,
            "checkpoint '", path_, "' is truncated or corrupt (its end marker is missing); use an earlier one");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, trailer + 16, 4);
  std::string index(index_bytes, '\0');
  file_->read_at(index_offset, index.data(), index_bytes);
  ARC_CHECK(crc32c(index.data(), index_bytes) == stored_crc, "checkpoint '", path_,
            "' is corrupt (its index fails its checksum); use an earlier one");
  const auto parsed = nlohmann::json::parse(index, nullptr, false);
  ARC_CHECK(!parsed.is_discarded() && parsed.is_object() && parsed.contains("meta") && parsed.at("meta").is_object() &&
                parsed.contains("entries") && parsed.at("entries").is_object(),
            "checkpoint '", path_, "' is corrupt (unreadable index); use an earlier one");
  meta_ = parsed.at("meta");
  reading_checkpoint(path_, [&] {
    for (const auto& [name, json] : parsed.at("entries").items()) read_entry(name, json, index_offset);
  });
}

// One entry of the index. Its data must lie inside the file before the index, and a tensor's shape
// must need exactly its bytes, so that nothing is allocated for more than the file holds.
void CheckpointReader::read_entry(const std::string& name, const nlohmann::json& json, uint64_t data_end) {
  Entry e;
  e.file = file_.get();
  e.kind = json.at("kind").get<std::string>();
  if (e.kind == "json") {
    e.value = json.at("value");
    entries_[name] = std::move(e);
    return;
  }
  ARC_CHECK(e.kind == "tensor" || e.kind == "archive", "checkpoint '", path_, "' is corrupt ('", name,
            "' is of unknown kind '", e.kind, "'); use an earlier one");
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  e.offset = detail::json_integer(json.at("offset"), "the offset of '" + name + "'", 0, kAny);
  e.bytes = detail::json_integer(json.at("bytes"), "the size of '" + name + "'", 0, kAny);
  ARC_CHECK(e.offset >= 0 && e.bytes >= 0 && static_cast<uint64_t>(e.offset) <= data_end &&
                static_cast<uint64_t>(e.bytes) <= data_end - static_cast<uint64_t>(e.offset),
            "checkpoint '", path_, "' is corrupt ('", name, "' lies outside the file); use an earlier one");
  e.checksum = json.at("checksum").get<std::string>();
  if (e.kind == "tensor") {
    e.dtype = scalar_type_named(json.at("dtype").get<std::string>(), path_);
    const auto& shape = json.at("shape");
    ARC_CHECK(shape.is_array(), "checkpoint '", path_, "' is corrupt ('", name, "' has shape ", shape.dump(),
              "); use an earlier one");
    for (const auto& size : shape) e.shape.push_back(detail::json_integer(size, "a size of '" + name + "'", 0, kAny));
    const auto needed = detail::byte_size(e.shape, c10::elementSize(e.dtype));
    ARC_CHECK(needed && *needed == static_cast<uint64_t>(e.bytes), "checkpoint '", path_, "' is corrupt ('", name,
              "' of shape ", shape_text(e.shape), " and type ", c10::toString(e.dtype), " has ", e.bytes,
              " bytes of data); use an earlier one");
  }
  entries_[name] = std::move(e);
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name, const std::string& kind) const {
  const auto found = entries_.find(name);
  ARC_CHECK(found != entries_.end() && found->second.kind == kind, "checkpoint '", path_, "' holds no ", kind, " '",
            name, "'; it was written by another program or configuration");
  return found->second;
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : entries_)
    if (e.kind == "tensor") names.push_back(name);
  return names;
}

bool CheckpointReader::holds_under(const std::string& prefix) const {
  const auto found = entries_.lower_bound(prefix + "/");
  return found != entries_.end() && found->first.rfind(prefix + "/", 0) == 0;
}

std::vector<std::string> CheckpointReader::top_names() const {
  std::set<std::string> names;
  for (const auto& [name, e] : entries_) names.insert(name.substr(0, name.find('/')));
  return {names.begin(), names.end()};
}

torch::Tensor CheckpointReader::empty_tensor(const std::string& name) const {
  const auto& e = entry(name, "tensor");
  return torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
}

std::pair<torch::ScalarType, std::vector<int64_t>> CheckpointReader::tensor_layout(const std::string& name) const {
  const auto& e = entry(name, "tensor");
  return {e.dtype, e.shape};
}

torch::Tensor CheckpointReader::tensor(const std::string& name) const {
  auto out = empty_tensor(name);
  read_into(name, out);
  return out;
}

void CheckpointReader::read_into(const std::string& name, const torch::Tensor& into) const {
  read_all_into({{name, into}});
}

// Tensors that take the file's bytes as they are are read in pieces spread over threads (two copy
// from the page cache about 1.4x as fast as one); the others through a CPU tensor.
void CheckpointReader::read_all_into(const std::vector<std::pair<std::string, torch::Tensor>>& targets) const {
  struct Piece {
    const detail::ReadFile* file;
    uint64_t offset;
    uint8_t* into;
    size_t size;
  };
  std::vector<Piece> pieces;
  size_t bytes_read = 0;
  std::vector<const std::pair<std::string, torch::Tensor>*> converted;
  for (const auto& target : targets) {
    const auto& [name, into] = target;
    const auto& e = entry(name, "tensor");
    ARC_CHECK(into.sizes().vec() == e.shape, "checkpoint '", path_, "': '", name, "' has shape ", shape_text(e.shape),
              ", the destination has ", shape_text(into.sizes().vec()), "; read it into a tensor of its shape");
    if (!(into.is_cpu() && into.is_contiguous() && into.scalar_type() == e.dtype)) {
      converted.push_back(&target);
      continue;
    }
    auto* bytes = static_cast<uint8_t*>(into.data_ptr());
    bytes_read += static_cast<size_t>(e.bytes);
    for (size_t at = 0; at < static_cast<size_t>(e.bytes); at += kLoadPiece)
      pieces.push_back({e.file, static_cast<uint64_t>(e.offset) + at, bytes + at,
                        std::min(kLoadPiece, static_cast<size_t>(e.bytes) - at)});
  }
  spread(pieces.size(), bytes_read,
         [&](size_t i) { pieces[i].file->read_at(pieces[i].offset, pieces[i].into, pieces[i].size); });
  torch::NoGradGuard no_grad;
  for (const auto* target : converted) target->second.copy_(tensor(target->first));
}

torch::serialize::InputArchive CheckpointReader::archive(const std::string& name) const {
  const auto& e = entry(name, "archive");
  std::string bytes(static_cast<size_t>(e.bytes), '\0');
  e.file->read_at(static_cast<uint64_t>(e.offset), bytes.data(), bytes.size());
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  return archive;
}

const nlohmann::json& CheckpointReader::json(const std::string& name) const { return entry(name, "json").value; }

LoadResult CheckpointReader::load_module(torch::nn::Module& module, bool strict, const std::string& prefix) const {
  auto state = named_state(module);
  const std::string folder = prefix + "/";
  LoadResult unmatched;
  std::vector<std::string> shapes;
  std::set<std::string> expected;
  for (const auto& [name, tensor] : state) {
    expected.insert(folder + name);
    const auto found = entries_.find(folder + name);
    if (found == entries_.end()) {
      unmatched.missing_keys.push_back(name);
    } else if (found->second.shape != tensor.sizes().vec()) {
      shapes.push_back("'" + name + "' has shape " + shape_text(found->second.shape) + ", the module has " +
                       shape_text(tensor.sizes().vec()));
    }
  }
  for (const auto& [name, e] : entries_)
    if (name.rfind(folder, 0) == 0 && expected.count(name) == 0)
      unmatched.unexpected_keys.push_back(name.substr(folder.size()));
  std::vector<std::string> problems = shapes;
  if (strict) {
    for (const auto& name : unmatched.missing_keys) problems.push_back("missing '" + name + "'");
    for (const auto& name : unmatched.unexpected_keys) problems.push_back("unexpected '" + name + "'");
  }
  if (!problems.empty()) {
    // A Trainer's checkpoint names the module it was written for and that module's hyperparameters.
    const auto written_for = meta_.is_object() ? meta_.value("module", std::string()) : std::string();
    const auto hparams = meta_.is_object() ? meta_.value("hparams", nlohmann::json()) : nlohmann::json();
    ARC_FAIL(
        "checkpoint '", path_, "' does not match ", module.name(), prefix == "model" ? "" : " (its '" + prefix + "')",
        ": ", join(problems, "; "), ". It was written for ", written_for.empty() ? "another model" : written_for,
        hparams.empty() || written_for.empty() ? "" : " with hyperparameters " + hparams.dump(),
        "; load it into the same architecture",
        strict && shapes.size() < problems.size() ? " (or load with strict=false to skip the names that differ)" : "");
  }
  std::vector<std::pair<std::string, torch::Tensor>> targets;
  for (auto& [name, tensor] : state)
    if (entries_.count(folder + name) > 0) targets.emplace_back(folder + name, tensor);
  read_all_into(targets);
  return unmatched;
}

}  // namespace arc
