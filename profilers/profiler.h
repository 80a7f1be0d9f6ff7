// Profiler: the interface the Trainer times its actions through (Lightning's Profiler: hooks, steps,
// backward, optimizer steps, data fetches, gradient collectives), ProfileScope, which times one
// action and costs one branch when no profiler is set, and make_profiler for the option's names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace arc {

/// Times named actions of a run. Implement start/stop/summary/reset for a profiler of your own.
class Profiler {
 public:
  virtual ~Profiler() = default;
  /// A stage begins: `stage` ("fit", "validate", "test", "predict"), the folder describe() writes to
  /// (the Trainer's log_dir) and this process's global rank.
  virtual void setup(const std::string& stage, const std::string& dirpath, int64_t global_rank);
  virtual void start(const std::string& action) = 0;
  virtual void stop(const std::string& action) = 0;
  /// What was recorded since setup, as a report.
  virtual std::string summary() const = 0;
  /// The stage ended: writes summary() to <dirpath>/<stage>-profile.txt (rank r > 0:
  /// <stage>-profile-<r>.txt), rank 0 prints it too, and forgets what was recorded.
  virtual void describe();

 protected:
  /// Forgets what was recorded.
  virtual void reset() = 0;
  const std::string& stage() const { return stage_; }
  const std::string& dirpath() const { return dirpath_; }
  int64_t global_rank() const { return global_rank_; }
  /// <dirpath>/<stage>-<name>[-<rank>].<extension>, its folder created.
  std::string output_path(const std::string& name, const std::string& extension) const;

 private:
  std::string stage_ = "fit";
  std::string dirpath_ = ".";
  int64_t global_rank_ = 0;
};

/// Times `action` on `profiler` for the scope's life; does nothing when `profiler` is null.
class ProfileScope {
 public:
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

/// The names TrainerOptions::profiler takes besides "" (none): "simple" and "advanced".
const std::vector<std::string>& profiler_names();

/// The profiler TrainerOptions::profiler names, or none for "".
std::shared_ptr<Profiler> make_profiler(const std::string& name);

}  // namespace arc
