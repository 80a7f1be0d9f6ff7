// CSVLogger: Lightning's layout, save_dir/name/version_N/metrics.csv plus hparams.yaml.
#pragma once

#include <arc/loggers/folder_logger.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace arc {

/// One row per logged step; the header is the union of all metric names (the file is rewritten
/// when a new name appears, as Lightning does). Written every `flush_every` rows and at the end.
/// A run resumed in the same version folder keeps the rows written before.
class CSVLogger : public FolderLogger {
 public:
  /// Writes `save_dir/name/version_N/metrics.csv`, N being `version` (< 0: as the Trainer chooses),
  /// every `flush_every` rows (at least 1).
  explicit CSVLogger(const std::string& save_dir, std::string name = "lightning_logs", int64_t version = -1,
                     int64_t flush_every = 100);

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void save() override;

 private:
  void load_existing(const std::string& path);

  int64_t flush_every_;
  bool opened_ = false;
  std::set<std::string> columns_;
  std::vector<std::map<std::string, double>> rows_;
  size_t written_ = 0;
};

}  // namespace arc
