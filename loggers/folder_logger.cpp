// FolderLogger.
#include <arc/loggers/folder_logger.h>

#include <arc/core/error.h>

#include <filesystem>
#include <fstream>

namespace arc {

int64_t next_version(const std::string& folder) {
  int64_t next = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("version_", 0) != 0) continue;
    char* end = nullptr;
    const long number = std::strtol(name.c_str() + 8, &end, 10);
    if (*end == '\0' && number >= next) next = number + 1;
  }
  return next;
}

FolderLogger::FolderLogger(const std::string& save_dir, std::string name, int64_t version)
    : name_(std::move(name)), version_(version >= 0 ? version : next_version(save_dir + "/" + name_)) {
  dir_ = save_dir + "/" + name_ + "/version_" + std::to_string(version_);
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  ARC_CHECK(!error, "cannot create the log folder '", dir_, "': ", error.message(), "; check save_dir");
}

void FolderLogger::log_hyperparams(const nlohmann::json& hparams) {
  std::ofstream(dir_ + "/hparams.json") << hparams.dump(2) << '\n';
}

}  // namespace arc
