// load_from_checkpoint: Lightning's MyModule.load_from_checkpoint(path) in C++ — the module made
// from the hyper-parameters its checkpoint stores, with the checkpoint's weights.
#pragma once

#include <arc/base/arg.h>
#include <arc/core/train_module.h>
#include <arc/fabric/checkpoint.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <type_traits>

namespace arc {

/// How load_from_checkpoint builds and fills the module.
class LoadOptions {
  /// Every parameter and buffer must match by name (shapes must match always).
  ARC_ARG(bool, strict) = true;
  /// Replace the stored hyper-parameters of these names (Lightning's **kwargs).
  ARC_ARG(nlohmann::json, hparams) = nlohmann::json::object();
};

/// The hyper-parameters `checkpoint` stores (save_hyperparameters), `overrides` merged over them.
nlohmann::json checkpoint_hparams(const CheckpointReader& checkpoint,
                                  const nlohmann::json& overrides = nlohmann::json::object());

/// Loads the weights of `checkpoint` into `module` and calls its on_load_checkpoint. Not `strict`:
/// the names found on one side only are returned, and a warning names them.
LoadResult load_checkpoint_weights(TrainModule& module, const CheckpointReader& checkpoint, bool strict = true);
/// The same for the checkpoint at `path`.
LoadResult load_checkpoint_weights(TrainModule& module, const std::string& path, bool strict = true);

/// A new `M` built from the checkpoint's hyper-parameters (`M(const nlohmann::json&)`, or `M()` for a
/// module that takes none), which it also records, with the checkpoint's weights. Fails with an
/// arc::Error naming the file for a missing, corrupt or mismatched checkpoint.
template <typename M>
std::shared_ptr<M> load_from_checkpoint(const std::string& path, const LoadOptions& options = LoadOptions()) {
  static_assert(std::is_base_of_v<TrainModule, M>, "load_from_checkpoint builds a TrainModule subclass");
  static_assert(std::is_constructible_v<M, const nlohmann::json&> || std::is_default_constructible_v<M>,
                "load_from_checkpoint needs a constructor M(const nlohmann::json& hparams) or M()");
  const CheckpointReader checkpoint(path);
  auto hparams = checkpoint_hparams(checkpoint, options.hparams());
  std::shared_ptr<M> module;
  if constexpr (std::is_constructible_v<M, const nlohmann::json&>)
    module = std::make_shared<M>(hparams);
  else
    module = std::make_shared<M>();
  module->save_hyperparameters(std::move(hparams));
  module->configure_model();
  load_checkpoint_weights(*module, checkpoint, options.strict());
  return module;
}

}  // namespace arc
