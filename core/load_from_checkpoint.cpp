// load_from_checkpoint's parts that need no module type.
#include <arc/core/load_from_checkpoint.h>

#include <arc/base/console.h>
#include <arc/base/error.h>

namespace arc {

nlohmann::json checkpoint_hparams(const CheckpointReader& checkpoint, const nlohmann::json& overrides) {
  ARC_CHECK(overrides.is_object(), "load_from_checkpoint's hparams must be a JSON object of names to values, got ",
            overrides.dump());
  auto hparams = checkpoint.meta().value("hparams", nlohmann::json::object());
  if (!hparams.is_object()) hparams = nlohmann::json::object();
  for (const auto& [name, value] : overrides.items()) hparams[name] = value;
  return hparams;
}

LoadResult load_checkpoint_weights(TrainModule& module, const CheckpointReader& checkpoint, bool strict) {
  const std::string& path = checkpoint.path();
  auto unmatched = checkpoint.load_module(module, strict);
  if (!unmatched.missing_keys.empty())
    console().warn("'{}' holds no {} of {}; they keep their initial values", path, join(unmatched.missing_keys),
                   module.name());
  if (!unmatched.unexpected_keys.empty())
    console().warn("'{}' holds {}, which {} does not have; they were not loaded", path, join(unmatched.unexpected_keys),
                   module.name());
  module.on_load_checkpoint(checkpoint.meta());
  return unmatched;
}

LoadResult load_checkpoint_weights(TrainModule& module, const std::string& path, bool strict) {
  return load_checkpoint_weights(module, CheckpointReader(path), strict);
}

}  // namespace arc
