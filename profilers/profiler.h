// Profiler: the interface the Trainer times its actions through (Lightning's Profiler: hooks, steps,
// backward, optimizer steps, data fetches, gradient collectives), ProfileScope, which times one
// action and costs one branch when no profiler is set, and make_profiler for the option's names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace arc {

class Config;

/// The profiler TrainerOptions::profiler names: "simple", "advanced" (also Lightning's "pytorch":
/// LibTorch's operators) or "" for none, with the init_args of Lightning's profiler classes: where
/// the report goes (`<dirpath>/<stage>-<filename>.txt`) and, for "advanced", its operator rows and
/// Chrome trace.
struct ProfilerSpec {
  /// "simple", "advanced", "pytorch" or "" (none).
  std::string name;
  /// The report's folder; "" is the Trainer's log_dir.
  std::string dirpath;
  /// The report's name between the stage and ".txt"; "" is "profile".
  std::string filename;
  /// "advanced": the operators listed (AdvancedProfiler::Options::row_limit), and whether the
  /// Chrome trace is written.
  ///@{
  std::optional<int64_t> row_limit;
  bool chrome_trace = true;
  ///@}

  /// The profiler named `profiler`, with the defaults of the rest, so that a name converts to a spec.
  ///@{
  ProfilerSpec(std::string profiler = "") : name(std::move(profiler)) {}  // NOLINT: profiler("simple")
  ProfilerSpec(const char* profiler) : name(profiler) {}                  // NOLINT
  ///@}
  /// Whether only the name is given (LightningCLI's string form).
  bool name_only() const;
};

/// Times named actions of a run. Implement start/stop/summary/reset for a profiler of your own.
class Profiler {
 public:
  virtual ~Profiler() = default;
  /// Where describe() writes, as Lightning's profilers' dirpath and filename: `dirpath` instead of
  /// the Trainer's log_dir ("" keeps it), `filename` instead of "profile" in the report's name (and
  /// before "-trace" in the advanced profiler's trace; "" keeps them).
  void set_output(std::string dirpath, std::string filename);
  /// A stage begins: `stage` ("fit", "validate", "test", "predict"), the folder describe() writes to
  /// (the Trainer's log_dir) and this process's global rank.
  virtual void setup(const std::string& stage, const std::string& dirpath, int64_t global_rank);
  /// Starts timing `action`, such as "run_training_batch"; the Trainer's actions nest, each stopped
  /// before the one around it.
  virtual void start(const std::string& action) = 0;
  /// Stops timing `action`, which start began.
  virtual void stop(const std::string& action) = 0;
  /// What was recorded since setup, as a report.
  virtual std::string summary() const = 0;
  /// The stage ended: writes summary() to `<dirpath>/<stage>-profile.txt` (rank r > 0:
  /// `<stage>-profile-<r>.txt`; set_output changes both), rank 0 prints it too, and forgets what was
  /// recorded.
  virtual void describe();

 protected:
  /// Forgets what was recorded.
  virtual void reset() = 0;
  /// The stage setup named ("fit" before any).
  const std::string& stage() const { return stage_; }
  /// The folder the outputs go to: set_output's, else the one setup gave.
  const std::string& dirpath() const { return dirpath_; }
  /// This process's global rank, as setup gave it.
  int64_t global_rank() const { return global_rank_; }
  /// The path of an output, its folder created. It is `<dirpath>/<stage>-<name>[-<kind>][-<rank>].<extension>`:
  /// the report's name ("profile" or set_output's filename) for the report (`kind` ""), and for another
  /// output `kind` alone ("trace"), or after the filename set_output gave.
  std::string output_path(const std::string& kind, const std::string& extension) const;

 private:
  std::string stage_ = "fit";
  std::string dirpath_ = ".";
  std::string own_dirpath_;
  std::string filename_;
  int64_t global_rank_ = 0;
};

/// Times `action` on `profiler` for the scope's life; does nothing when `profiler` is null.
class ProfileScope {
 public:
  /// Starts `action` on `profiler`, if any; the destructor stops it.
  ProfileScope(Profiler* profiler, std::string_view action) : profiler_(profiler) {
    if (profiler_ == nullptr) return;
    action_.assign(action);
    profiler_->start(action_);
  }
  ~ProfileScope() {
    if (profiler_ != nullptr) finish();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  /// Stops the action; a profiler's error goes to the console, since a destructor must not throw.
  void finish() noexcept;

  Profiler* profiler_;
  std::string action_;
};

/// The action of one training batch, which the advanced profiler counts to open its window.
inline constexpr const char* kTrainingBatchAction = "run_training_batch";

/// The unqualified class name of `type` ("TinyModule" for arc::testing::TinyModule), for action names.
std::string class_name(const std::type_info& type);

/// The names TrainerOptions::profiler takes besides "" (none): "simple", "advanced" and "pytorch".
const std::vector<std::string>& profiler_names();

/// Lightning's profiler class `name` with its init_args: SimpleProfiler is "simple", AdvancedProfiler
/// and PyTorchProfiler "advanced", PassThroughProfiler none; dirpath and filename say where the report
/// goes, PyTorchProfiler's row_limit and export_to_chrome shape the operator table and the trace.
/// Init_args without a counterpart (extended, emit_nvtx, dump_stats, ...) are errors unless at
/// Lightning's defaults.
ProfilerSpec profiler_class(const std::string& name, const Config& init_args);
/// The profiler classes profiler_class takes.
const std::vector<std::string>& profiler_class_names();

/// The profiler `spec` names, set up as it says, or none for "".
std::shared_ptr<Profiler> make_profiler(const ProfilerSpec& spec);

}  // namespace arc
