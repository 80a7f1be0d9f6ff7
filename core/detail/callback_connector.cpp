// The callback connector: the callbacks a Trainer adds, and those a module adds.
#include <arc/core/detail/callback_connector.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/callbacks/device_stats_monitor.h>
#include <arc/callbacks/early_stopping.h>
#include <arc/callbacks/elastic_checkpoint.h>
#include <arc/callbacks/gradient_accumulation_scheduler.h>
#include <arc/callbacks/lambda_callback.h>
#include <arc/callbacks/learning_rate_monitor.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/on_exception_checkpoint.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/callbacks/throughput_monitor.h>
#include <arc/callbacks/timer.h>

#include <algorithm>
#include <typeinfo>

namespace arc::detail {
namespace {

template <typename T>
bool has(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  for (const auto& callback : callbacks)
    if (std::dynamic_pointer_cast<T>(callback)) return true;
  return false;
}

// Whether `replacement` is a `T` while `callback` is exactly a `T`.
template <typename T>
bool replaces_as(const Callback& replacement, const Callback& callback) {
  return typeid(callback) == typeid(T) && dynamic_cast<const T*>(&replacement) != nullptr;
}

bool replaces(const Callback& replacement, const Callback& callback) {
  return typeid(replacement) == typeid(callback) || replaces_as<DeviceStatsMonitor>(replacement, callback) ||
         replaces_as<EarlyStopping>(replacement, callback) || replaces_as<ElasticCheckpoint>(replacement, callback) ||
         replaces_as<GradientAccumulationScheduler>(replacement, callback) ||
         replaces_as<LambdaCallback>(replacement, callback) ||
         replaces_as<LearningRateMonitor>(replacement, callback) ||
         replaces_as<ModelCheckpoint>(replacement, callback) || replaces_as<ModelSummary>(replacement, callback) ||
         replaces_as<OnExceptionCheckpoint>(replacement, callback) || replaces_as<ProgressBar>(replacement, callback) ||
         replaces_as<ThroughputMonitor>(replacement, callback) || replaces_as<Timer>(replacement, callback);
}

bool checkpoints(const Callback& callback) {
  return dynamic_cast<const ModelCheckpoint*>(&callback) != nullptr ||
         dynamic_cast<const OnExceptionCheckpoint*>(&callback) != nullptr ||
         dynamic_cast<const ElasticCheckpoint*>(&callback) != nullptr;
}

// As Lightning orders them: what other callbacks change at a batch's end (weight averaging) is in
// the checkpoint saved there.
void checkpointing_last(std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::stable_partition(callbacks.begin(), callbacks.end(),
                        [](const auto& callback) { return !checkpoints(*callback); });
}

}  // namespace

void add_module_callbacks(std::vector<std::shared_ptr<Callback>>& callbacks,
                          const std::vector<std::shared_ptr<Callback>>& from_module) {
  for (const auto& callback : from_module)
    ARC_CHECK(callback != nullptr, "configure_callbacks() returned a null callback; return ones made with ",
              "std::make_shared<...>(...)");
  if (from_module.empty()) return;
  std::vector<std::shared_ptr<Callback>> kept;
  for (const auto& callback : callbacks) {
    const bool replaced = std::any_of(from_module.begin(), from_module.end(),
                                      [&](const auto& replacement) { return replaces(*replacement, *callback); });
    if (replaced) {
      console().info("the module's configure_callbacks() replaces the Trainer's {}", callback->state_key());
    } else {
      kept.push_back(callback);
    }
  }
  kept.insert(kept.end(), from_module.begin(), from_module.end());
  checkpointing_last(kept);
  callbacks = std::move(kept);
}

void add_default_callbacks(std::vector<std::shared_ptr<Callback>>& callbacks, const TrainerOptions& options,
                           bool elastic) {
  if (options.barebones()) {
    const char* given = has<ModelCheckpoint>(callbacks) ? "ModelCheckpoint"
                        : has<ProgressBar>(callbacks)   ? "ProgressBar"
                        : has<ModelSummary>(callbacks)  ? "ModelSummary"
                                                        : nullptr;
    ARC_CHECK(given == nullptr, "barebones=true, but the Trainer was given a ", given,
              " callback; barebones mode turns off checkpointing, the progress bar and the model summary: drop the ",
              "callback or barebones");
  }
  if (options.enable_model_summary() && !has<ModelSummary>(callbacks))
    callbacks.push_back(std::make_shared<ModelSummary>());
  if (options.enable_progress_bar() && !has<ProgressBar>(callbacks))
    callbacks.push_back(std::make_shared<ProgressBar>());
  // Lightning's default checkpointing, plus last.ckpt so that ckpt_path="last" can resume.
  if (options.enable_checkpointing() && !has<ModelCheckpoint>(callbacks))
    callbacks.push_back(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions().save_last(true)));
  const bool periodic =
      options.elastic_checkpoint_every_n_steps() > 0 || options.elastic_checkpoint_every_seconds() > 0;
  if (elastic && periodic && !has<ElasticCheckpoint>(callbacks))
    callbacks.push_back(std::make_shared<ElasticCheckpoint>(options.elastic_checkpoint_every_n_steps(),
                                                            options.elastic_checkpoint_every_seconds()));
  checkpointing_last(callbacks);
}

}  // namespace arc::detail
