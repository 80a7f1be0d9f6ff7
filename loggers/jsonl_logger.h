// JsonLinesLogger: one JSON object per logged step in save_dir/name/version_N/metrics.jsonl.
#pragma once

#include <arc/loggers/folder_logger.h>

#include <fstream>
#include <string>

namespace arc {

/// Appends {"step": s, "<metric>": v, ...} lines; hyper-parameters go to hparams.yaml beside them.
class JsonLinesLogger : public FolderLogger {
 public:
  /// Picks the next free version_N under save_dir/name unless `version` is given (>= 0).
  explicit JsonLinesLogger(const std::string& save_dir, std::string name = "lightning_logs", int64_t version = -1);

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void save() override;

 private:
  std::ofstream out_;
};

}  // namespace arc
