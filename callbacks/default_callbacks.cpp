// add_default_callbacks (declared in core/detail/callback_connector.h).
#include <arc/callbacks/elastic_checkpoint.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/core/detail/callback_connector.h>

namespace arc::detail {
namespace {

template <typename T>
bool has(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  for (const auto& callback : callbacks)
    if (std::dynamic_pointer_cast<T>(callback)) return true;
  return false;
}

}  // namespace

void add_default_callbacks(std::vector<std::shared_ptr<Callback>>& callbacks, const TrainerOptions& options,
                           bool elastic) {
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
}

}  // namespace arc::detail
