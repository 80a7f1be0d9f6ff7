// FolderLogger: the part every file logger shares — Lightning's save_dir/name/version_N folder,
// picked as the next free version, and hyper-parameters written beside the metrics.
#pragma once

#include <arc/loggers/logger.h>

#include <string>

namespace arc {

/// A logger that writes into save_dir/name/version_N.
class FolderLogger : public Logger {
 public:
  std::string name() const override { return name_; }
  std::string version() const override { return "version_" + std::to_string(version_); }
  std::string log_dir() const override { return dir_; }
  /// Writes hparams.json in the run's folder.
  void log_hyperparams(const nlohmann::json& hparams) override;

 protected:
  /// Creates the folder; `version` < 0 takes the next free one.
  FolderLogger(const std::string& save_dir, std::string name, int64_t version);

 private:
  std::string name_;
  int64_t version_;
  std::string dir_;
};

/// The next free `version_N` number in `folder` (0 when it does not exist).
int64_t next_version(const std::string& folder);

}  // namespace arc
