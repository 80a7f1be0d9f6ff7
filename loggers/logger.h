// Logger: where metrics go. Only rank 0 calls loggers; every rank agrees on their versions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace arc {

/// Receives metrics every log_every_n_steps steps and at epoch ends.
class Logger {
 public:
  virtual ~Logger() = default;
  /// The logger's name (a FolderLogger's folder under its save_dir, "lightning_logs" by default).
  virtual std::string name() const = 0;
  /// The run's version ("version_3"), or "" when the logger has none.
  virtual std::string version() const { return ""; }
  /// Folder of this run's files, or "" when the logger writes none.
  virtual std::string log_dir() const { return ""; }
  /// The folder whose version_N subfolders the run's version is picked among (save_dir/name), or
  /// "" for a logger without versions.
  virtual std::string versions_folder() const { return ""; }
  /// The run's version number; -1 for a logger without versions.
  virtual int64_t version_number() const { return -1; }
  /// Sets the version: the Trainer's choice for the run, or the resumed checkpoint's.
  virtual void set_version_number(int64_t) {}
  /// Whether the user gave the version or read it before any Trainer chose one (a resumed checkpoint
  /// leaves it then).
  virtual bool version_fixed() const { return false; }
  /// Records `metrics` at `step` (the Trainer's include the current "epoch"); called on rank 0 only.
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  /// Records the run's hyper-parameters (the module's hparams, once a stage's checkpoint is loaded or,
  /// in fit, after on_fit_start); called on rank 0 only.
  virtual void log_hyperparams(const nlohmann::json&) {}
  /// Writes buffered records out.
  virtual void save() {}
  /// Called once at the end of a run with "success" or "failed".
  virtual void finalize(const std::string&) { save(); }
};

}  // namespace arc
