// Checkpoint files.
#include <arc/core/checkpoint.h>

#include <arc/core/error.h>

#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>
#include <filesystem>

namespace arc {
namespace {

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string shape_text(const nlohmann::json& shape) { return shape.dump(); }

}  // namespace

void write_atomically(torch::serialize::OutputArchive& archive, const std::string& path) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  ARC_CHECK(!error, "cannot create the folder of checkpoint '", path, "': ", error.message());
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    archive.save_to(temporary);
  } catch (const std::exception& failure) {
    std::filesystem::remove(temporary, error);
    ARC_FAIL("cannot write checkpoint '", path, "': ", failure.what(), "; check free space and permissions");
  }
  fsync_path(temporary, O_RDONLY);
  std::filesystem::rename(temporary, target, error);
  ARC_CHECK(!error, "cannot move checkpoint into place at '", path, "': ", error.message());
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".", O_RDONLY | O_DIRECTORY);
}

torch::serialize::InputArchive open_checkpoint(const std::string& path, nlohmann::json& meta) {
  ARC_CHECK(std::filesystem::exists(path), "checkpoint '", path, "' does not exist; check ckpt_path");
  ARC_CHECK(std::filesystem::file_size(path) > 0, "checkpoint '", path, "' is empty (truncated); use an earlier one");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const std::exception&) {
    ARC_FAIL("checkpoint '", path, "' is truncated or corrupt and cannot be read; use an earlier checkpoint");
  }
  c10::IValue text;
  ARC_CHECK(archive.try_read("arc_meta", text) && text.isString(), "file '", path,
            "' is not an Arclight checkpoint (no metadata); pass a file written by Trainer::save_checkpoint");
  meta = nlohmann::json::parse(text.toStringRef(), nullptr, false);
  ARC_CHECK(!meta.is_discarded() && meta.is_object(), "checkpoint '", path,
            "' has corrupt metadata; use an earlier one");
  const auto version = meta.value("format_version", int64_t{-1});
  ARC_CHECK(version == kCheckpointFormatVersion, "checkpoint '", path, "' has format version ", version,
            ", but this Arclight reads version ", kCheckpointFormatVersion,
            "; load it with the Arclight that wrote it, or retrain");
  return archive;
}

nlohmann::json describe_state(const torch::nn::Module& module) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value().sizes().vec();
  for (const auto& item : module.named_buffers()) out[item.key()] = item.value().sizes().vec();
  return out;
}

void check_compatible(const nlohmann::json& meta, const torch::nn::Module& module, const std::string& path) {
  const auto stored = meta.value("state", nlohmann::json::object());
  const auto expected = describe_state(module);
  std::vector<std::string> problems;
  for (const auto& item : expected.items()) {
    if (!stored.contains(item.key())) {
      problems.push_back("missing '" + item.key() + "'");
    } else if (stored[item.key()] != item.value()) {
      problems.push_back("'" + item.key() + "' has shape " + shape_text(stored[item.key()]) + ", the module has " +
                         shape_text(item.value()));
    }
  }
  for (const auto& item : stored.items())
    if (!expected.contains(item.key())) problems.push_back("unexpected '" + item.key() + "'");
  ARC_CHECK(problems.empty(), "checkpoint '", path, "' does not match ", module.name(), ": ", join(problems, "; "),
            ". It was written for another model; load it into the same architecture");
}

}  // namespace arc
