// CSVLogger: Lightning's layout, save_dir/name/version_N/metrics.csv plus hparams.json.
#pragma once

#include <arc/loggers/logger.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace arc {

/// One row per logged step; the header is the union of all metric names (the file is rewritten
/// when a new name appears, as Lightning does). Written every `flush_every` rows and at the end.
class CSVLogger : public Logger {
 public:
  explicit CSVLogger(std::string save_dir, std::string name = "lightning_logs", int64_t version = -1,
                     int64_t flush_every = 100);

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
  int64_t flush_every_;
  std::set<std::string> columns_;
  std::vector<std::map<std::string, double>> rows_;
  size_t written_ = 0;
};

}  // namespace arc
