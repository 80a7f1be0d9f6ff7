// JsonLinesLogger: one JSON object per logged step in save_dir/name/version_N/metrics.jsonl.
#pragma once

#include <arc/loggers/logger.h>

#include <fstream>
#include <string>

namespace arc {

/// Appends {"step": s, "<metric>": v, ...} lines; hyper-parameters go to hparams.json beside them.
class JsonLinesLogger : public Logger {
 public:
  /// Picks the next free version_N under save_dir/name unless `version` is given (>= 0).
  explicit JsonLinesLogger(std::string save_dir, std::string name = "lightning_logs", int64_t version = -1);

  std::string name() const override { return name_; }
  std::string version() const override { return "version_" + std::to_string(version_); }
  std::string log_dir() const override { return dir_; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const nlohmann::json& hparams) override;
  void save() override;

 private:
  std::string name_;
  int64_t version_;
  std::string dir_;
  std::ofstream out_;
};

/// The next free `version_N` number in `folder` (0 when it does not exist).
int64_t next_version(const std::string& folder);

}  // namespace arc
