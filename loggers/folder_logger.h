// FolderLogger: the part every file logger shares — Lightning's save_dir/name/version_N folder and
// hyper-parameters written beside the metrics. The version is decided once per run by the Trainer
// (rank 0 picks, every rank learns it; loggers of one folder share it), and only rank 0
// creates it, when it claims the number.
#pragma once

#include <arc/loggers/logger.h>

#include <map>
#include <string>

namespace arc {

/// A logger that writes into save_dir/name/version_N.
class FolderLogger : public Logger {
 public:
  /// The `name` it was made with: its folder under save_dir.
  std::string name() const override { return name_; }
  std::string version() const override { return "version_" + std::to_string(version_number()); }
  std::string log_dir() const override;
  std::string versions_folder() const override { return save_dir_ + "/" + name_; }
  /// The version given, chosen or, for a logger used alone, the next free one.
  int64_t version_number() const override;
  void set_version_number(int64_t version) override { version_ = version; }
  bool version_fixed() const override { return fixed_; }
  /// Writes hparams.yaml in the run's folder (Lightning's file).
  void log_hyperparams(const nlohmann::json& hparams) override;
  /// Lightning's prefix: each metric is written as "<prefix>-<name>" ("": as logged).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  /// The prefix set_prefix set ("" by default).
  const std::string& prefix() const { return prefix_; }

 protected:
  /// `version` < 0 leaves the choice to the Trainer.
  FolderLogger(std::string save_dir, std::string name, int64_t version);
  /// log_dir(), or its subfolder `sub`, created on first use.
  std::string folder(const std::string& sub = "");
  /// `metrics` under the names they are written with (see set_prefix).
  std::map<std::string, double> prefixed(const std::map<std::string, double>& metrics) const;

 private:
  std::string save_dir_;
  std::string name_;
  std::string prefix_;
  mutable int64_t version_;
  mutable bool fixed_;
};

/// The next free `version_N` number in `folder`, claimed by creating its folder (safe when several
/// runs start in one folder at once).
int64_t claim_next_version(const std::string& folder);

}  // namespace arc
