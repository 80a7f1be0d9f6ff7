// The command line of `arc` as a library, LightningCLI's counterpart: a program of your own that
// registers its modules (or names them to arc::cli::main) gets fit, validate, test, predict,
// lr_find, scale_batch_size, export and consolidate, YAML and JSON configs, --print_config and --help.
#pragma once

#include <arc/base/arg.h>

#include <arc/base/config.h>
#include <arc/core/module_registry.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace arc::detail {
/// The name of the class `type` without its namespaces ("MyModel" for my_project::MyModel).
std::string class_name(const std::type_info& type);

/// Registers `Class` in `registry` under its class name unless that name is registered; returns the name.
template <typename Class, typename T>
std::string register_class(Registry<T, const Config&>& registry) {
  const auto name = class_name(typeid(Class));
  const auto names = registry.names();
  if (std::find(names.begin(), names.end(), name) == names.end()) registry.template add_class<Class>(name);
  return name;
}
}  // namespace arc::detail

namespace arc::cli {

/// A (source, target) pair of config keys that link_arguments links.
using ArgumentLink = std::pair<std::string, std::string>;

/// What a program's command line builds when its config does not say, and how it names itself.
class CliOptions {
  /// The module a config builds when its module section names none (LightningCLI's model_class): a
  /// registered name. Empty: the only registered module, else the config must name one.
  ARC_ARG(std::string, module);
  /// The data module a config builds when its data section names none. Empty: the module's default
  /// data module (ARC_REGISTER_MODULE's third argument), else the config must name one.
  ARC_ARG(std::string, data);
  /// The program's name in help and messages. Empty: the file name the program was started by.
  ARC_ARG(std::string, program);
  /// The examples at the end of --help. Empty: a few commands of the program's own.
  ARC_ARG(std::string, examples);
  /// LightningCLI's default_env: environment variables give defaults that config files and flags
  /// override: `<env_prefix>_CONFIG` a config file, `<env_prefix>_TRAINER__MAX_EPOCHS=3` the key
  /// trainer.max_epochs (capitals, "__" for each dot).
  ARC_ARG(bool, default_env) = false;
  /// The variables' prefix (LightningCLI's "PL").
  ARC_ARG(std::string, env_prefix) = "PL";
  /// LightningCLI's trainer_defaults: trainer keys with the values a run takes when no config,
  /// variable or flag sets them (the `arc` tool's {"max_epochs": 1}); the Trainer's defaults otherwise.
  ARC_ARG(nlohmann::json, trainer_defaults) = nlohmann::json::object();
  /// LightningCLI's link_arguments: (source, target) pairs of config keys such as
  /// {"data.batch_size", "model.batch_size"}. The target takes the source's value, as the config
  /// gave it or as its class's default, and a config may not set it. Sources are keys of the model
  /// and data sections, targets of the model, data and trainer sections.
  ARC_ARG(std::vector<ArgumentLink>, link_arguments);
};

/// Runs the command line (argv[1] is a subcommand: fit, validate, test, predict, lr_find,
/// scale_batch_size, export, consolidate, modules, reference) over the registered modules and data
/// modules; returns the exit status (0; 2 for a usage error or an arc::Error, such as a config's;
/// 1 for another failure of the run).
/// Errors are printed, not thrown.
int run(int argc, char** argv, const CliOptions& options = CliOptions());

/// LightningCLI(Module, Data) in C++: registers `Module` (and `Data`, unless void) under their class
/// names, makes them what a config builds when it names no module or data, and runs the command
/// line. `int main(int argc, char** argv) { return arc::cli::main<MyModel, MyData>(argc, argv); }`
template <typename Module, typename Data = void>
int main(int argc, char** argv, CliOptions options = CliOptions()) {
  static_assert(std::is_base_of_v<TrainModule, Module> && std::is_constructible_v<Module, const Config&>,
                "arc::cli::main<Module>: Module must derive from arc::TrainModule and have a constructor "
                "from const arc::Config& (its config section)");
  options.module(arc::detail::register_class<Module>(module_registry()));
  if constexpr (!std::is_void_v<Data>) {
    static_assert(std::is_base_of_v<DataModule, Data> && std::is_constructible_v<Data, const Config&>,
                  "arc::cli::main<Module, Data>: Data must derive from arc::DataModule and have a constructor "
                  "from const arc::Config& (its config section)");
    options.data(arc::detail::register_class<Data>(data_module_registry()));
  }
  return run(argc, argv, options);
}

}  // namespace arc::cli
