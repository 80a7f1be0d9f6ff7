// add_default_callbacks: the callbacks a Trainer adds to the user's, as Lightning's callback
// connector, which makes the default ModelCheckpoint, progress bar and model summary itself.
#pragma once

#include <arc/core/callback.h>
#include <arc/core/trainer_options.h>

#include <memory>
#include <vector>

namespace arc::detail {

/// Adds ModelSummary, ProgressBar, ModelCheckpoint (with last.ckpt, so that ckpt_path="last" can
/// resume) and, under a restarting launcher (`elastic`), ElasticCheckpoint: each unless the options
/// turn it off or `callbacks` already has one. The checkpointing callbacks then move to the end,
/// as in Lightning, so that what the others change at a batch's end is in what they save.
void add_default_callbacks(std::vector<std::shared_ptr<Callback>>& callbacks, const TrainerOptions& options,
                           bool elastic);

/// Adds what TrainModule::configure_callbacks returned, as Lightning does: each replaces the
/// callbacks of its class (or of a built-in class it derives from, as a ModelCheckpoint subclass
/// replaces the default ModelCheckpoint), and the checkpointing callbacks move to the end.
void add_module_callbacks(std::vector<std::shared_ptr<Callback>>& callbacks,
                          const std::vector<std::shared_ptr<Callback>>& from_module);

}  // namespace arc::detail
