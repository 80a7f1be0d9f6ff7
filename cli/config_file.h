// A command line's config: JSON or YAML files deep-merged in order, LightningCLI's dotted flags as
// overrides, and which file set each key, for messages. No LibTorch here: the `arc` launcher reads
// configs too.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace arc::cli {

/// A run's config and where each of its keys came from.
struct LoadedConfig {
  /// The merged config: files in order, then the overrides.
  nlohmann::json config;
  /// Key path ("trainer.max_epochs", "trainer.callbacks[1].init_args.mode") → the file that set it last, or "--set".
  std::map<std::string, std::string> origins;

  /// `message` prefixed with the file of the key it names ("run.yaml: ..."), when it names one.
  std::string locate(const std::string& message) const;
};

/// What LightningCLI's default_env takes from the environment: the config file `<prefix>_CONFIG`
/// names, and a key of each `<prefix>_<KEY>` whose KEY is a dotted path of a config section in
/// capitals with "__" for each dot (PL_TRAINER__MAX_EPOCHS=3 is trainer.max_epochs=3).
struct EnvironmentDefaults {
  /// `<prefix>_CONFIG`, or "" when unset.
  std::string config_file;
  /// That variable's name, for messages.
  std::string config_variable;
  /// ("trainer.max_epochs=3", "PL_TRAINER__MAX_EPOCHS"): each override and the variable that gave it,
  /// by the variables' names.
  std::vector<std::pair<std::string, std::string>> overrides;
};

/// The environment's defaults for variables that begin with `prefix` and "_".
EnvironmentDefaults environment_defaults(const std::string& prefix);

/// Reads `config_paths` (JSON, or YAML for .yaml and .yml) in order, each deep-merged over the ones
/// before, as LightningCLI does, then applies each "dotted.key=value" override. `base` (the
/// program's trainer_defaults) and then `environment`, from environment_defaults, come first: the
/// files and the overrides win over them.
LoadedConfig load_config(const std::vector<std::string>& config_paths, const std::vector<std::string>& overrides,
                         const EnvironmentDefaults& environment = EnvironmentDefaults(),
                         const nlohmann::json& base = nlohmann::json::object());

/// `args` (without the program) with LightningCLI's dotted flags ("--trainer.max_epochs=3",
/// "--trainer.max_epochs 3", "--module.lr 0.1") and its flags of a whole top-level key
/// ("--model=cnn_classifier", "--optimizer Adam", "--seed_everything 42") written as the overrides
/// they mean ("--set", "trainer.max_epochs=3"), and jsonargparse's "--trainer.callbacks.help
/// ModelCheckpoint" as ("--class_help", "trainer.callbacks=ModelCheckpoint"); every other argument as it was.
std::vector<std::string> with_dotted_flags(const std::vector<std::string>& args);

/// The JSON on the first "<tag> {...}" line of `output` (rank 0's "RESULT" line of a command line
/// and of the example programs), or null when there is none: the one reader of those lines, for
/// tests and benchmarks.
inline nlohmann::json read_report(const std::string& output, const std::string& tag = "RESULT") {
  const auto at = output.find(tag + " ");
  if (at == std::string::npos) return nullptr;
  const auto begin = at + tag.size() + 1;
  return nlohmann::json::parse(output.substr(begin, output.find('\n', begin) - begin));
}

}  // namespace arc::cli
