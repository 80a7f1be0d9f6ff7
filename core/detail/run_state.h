// RunState: what a Trainer's stages change as they run — progress, flags, batch counts, the
// optimizers and the metrics. The Trainer owns it and hands it to the loops and connectors, its only
// other writers; and call_hook, the one way hooks are called: every callback, then the module.
#pragma once

#include <arc/core/detail/logger_connector.h>
#include <arc/core/trainer.h>
#include <arc/fabric/async_checkpoint_writer.h>
#include <arc/strategies/cluster/cluster_environment.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

namespace arc {
class FitLoop;
}

namespace arc::detail {

struct RunState {
  RunState(std::vector<std::shared_ptr<Logger>>& loggers, Strategy& strategy) : logging(loggers, strategy) {}

  Progress progress;
  Stage stage = Stage::fit;
  bool training = false;
  /// A tuning run inside fit (the Tuner's learning-rate test or a batch-size trial), which skips
  /// on_fit_start and on_fit_end.
  bool tuning = false;
  bool sanity_checking = false;
  /// Once Trainer::request_stop was called (0 before): the number of the fit's validation that the
  /// stop comes after (the validation running at the first call, or the next); a fit that stops
  /// mid-epoch runs it first, as Lightning's does.
  int64_t stop_after_validation = 0;
  /// The number of the fit's validation running now (progress.validation_runs + 1); 0: none.
  int64_t validation_running = 0;
  /// Whether this training batch's step metrics go to the loggers (every log_every_n_steps).
  bool logging_batch = false;
  /// Whether log() said once that barebones mode ignores it.
  bool barebones_log_said = false;
  std::string stop_reason;
  int64_t num_training_batches = 0;
  /// The training loader while fit runs, and the loop that runs it.
  DataLoader* train_loader = nullptr;
  FitLoop* fit_loop = nullptr;
  /// The training batch size that BatchSizeFinder chose, which replaces the training data's own
  /// whenever fit loads it.
  std::optional<int64_t> train_batch_size;
  /// The training stream's position in the checkpoint a fit resumes from (DataLoader::state_dict).
  nlohmann::json resumed_train_data;
  /// The data module of the stage running (null when it has none), whose state checkpoints keep.
  DataModule* data_module = nullptr;
  int64_t num_val_batches = 0;
  /// The evaluation stage's loaders, and which one runs.
  int64_t num_dataloaders = 1;
  int64_t dataloader_idx = 0;
  /// Optimizer steps the fit will take (-1: no end), known from the FitLoop's start.
  std::optional<int64_t> estimated_stepping_batches;
  int64_t current_batch_size = 0;
  /// The dataset indices of the current predict batch's samples.
  std::vector<int64_t> batch_indices;
  int64_t accumulate_grad_batches = 1;
  std::chrono::steady_clock::time_point stage_start;
  /// Trainer::agreed_elapsed_seconds: the latest clock of the ranks' latest vote in this stage.
  double agreed_seconds = 0;
  std::vector<OptimizerConfig> optimizers;
  LoggerConnector logging;
  /// Checkpoints written in the background (async_checkpointing), and whether saves may go there:
  /// while a fit runs, whose batch boundaries report a failed write.
  AsyncCheckpointWriter checkpoint_writes;
  bool background_saves = false;
  /// The launcher this job runs under (resolve_run), which the signal connector asks about requeue.
  std::shared_ptr<cluster::ClusterEnvironment> cluster_environment;
};

/// The profiler's name for `what` (a hook or step) of the module, "[TrainModule]<class>.<what>"; ""
/// without a profiler, so that nothing is built when nobody profiles.
inline std::string module_action(const Profiler* profiler, const TrainModule& module, const char* what) {
  return profiler == nullptr ? std::string() : "[TrainModule]" + class_name(typeid(module)) + "." + what;
}

/// Calls `callback_hook` on every callback, then `module_hook` on the module, with `args`: Lightning's
/// order for a hook that both have. The profiler, when there is one, times each call under `name`.
template <typename... CallbackArgs, typename... ModuleArgs, typename... Args>
void call_hook(Trainer& trainer, TrainModule& module, const char* name,
               void (Callback::*callback_hook)(Trainer&, TrainModule&, CallbackArgs...),
               void (TrainModule::*module_hook)(ModuleArgs...), Args&&... args) {
  Profiler* profiler = trainer.profiler();
  for (auto& callback : trainer.callbacks()) {
    ProfileScope scope(profiler, profiler ? "[Callback]" + callback->state_key() + "." + name : std::string());
    ((*callback).*callback_hook)(trainer, module, args...);
  }
  ProfileScope scope(profiler, module_action(profiler, module, name));
  (module.*module_hook)(args...);
}

}  // namespace arc::detail
