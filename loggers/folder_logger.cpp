// FolderLogger.
#include <arc/loggers/folder_logger.h>

#include <arc/base/detail/yaml.h>
#include <arc/base/error.h>

#include <filesystem>
#include <fstream>

namespace arc {
namespace {

// Fails naming `folder` when making it failed.
void check_made(const std::string& folder, const std::error_code& error) {
  ARC_CHECK(!error, "cannot create the log folder '", folder, "': ", error.message(),
            "; make its parent writable or give the logger another save_dir (the default loggers' is "
            "default_root_dir)");
}

}  // namespace

int64_t claim_next_version(const std::string& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  check_made(folder, error);
  int64_t next = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("version_", 0) != 0) continue;
    char* end = nullptr;
    const long number = std::strtol(name.c_str() + 8, &end, 10);
    if (*end == '\0' && number >= next) next = number + 1;
  }
  // Another run in the same folder may take a number between the listing and here: the folder is
  // claimed by creating it, which only one process can do, and a taken number moves on to the next.
  for (;; ++next) {
    const std::string claimed = folder + "/version_" + std::to_string(next);
    if (std::filesystem::create_directory(claimed, error)) return next;
    check_made(claimed, error);
  }
}

FolderLogger::FolderLogger(std::string save_dir, std::string name, int64_t version)
    : save_dir_(std::move(save_dir)), name_(std::move(name)), version_(version), fixed_(version >= 0) {}

int64_t FolderLogger::version_number() const {
  if (version_ < 0) {  // used alone: the number claimed stays, as one given would
    version_ = claim_next_version(versions_folder());
    fixed_ = true;
  }
  return version_;
}

std::string FolderLogger::log_dir() const { return versions_folder() + "/" + version(); }

std::string FolderLogger::folder(const std::string& sub) {
  const std::string dir = sub.empty() ? log_dir() : (std::filesystem::path(log_dir()) / sub).string();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  check_made(dir, error);
  return dir;
}

std::map<std::string, double> FolderLogger::prefixed(const std::map<std::string, double>& metrics) const {
  if (prefix_.empty()) return metrics;
  std::map<std::string, double> out;
  for (const auto& [name, value] : metrics) out.emplace(prefix_ + "-" + name, value);
  return out;
}

void FolderLogger::log_hyperparams(const nlohmann::json& hparams) {
  std::ofstream(folder() + "/hparams.yaml") << to_yaml(hparams);
}

}  // namespace arc
