// What the command line prints about the keys a config may set (cli_help.h).
#include <arc/cli/detail/cli_help.h>

#include <arc/base/class_path.h>
#include <arc/base/config.h>
#include <arc/base/error.h>
#include <arc/callbacks/callback_registry.h>
#include <arc/core/module_registry.h>
#include <arc/core/optimizer_registry.h>
#include <arc/core/trainer_options.h>
#include <arc/loggers/logger_registry.h>
#include <arc/profilers/profiler.h>
#include <arc/strategies/detail/lightning_strategy.h>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace arc::cli {
namespace {

// The keys `create` reads from a survey of `section`, with their defaults: those a config may set.
std::vector<std::string> config_keys(const std::string& section, const std::function<void(const Config&)>& create) {
  const auto config = Config::survey(section);
  try {
    create(config);
  } catch (const Error&) {
    // A constructor that refuses a survey's stand-in values stops there, its keys read.
  }
  return config.keys_with_defaults();
}

// ": hidden=256, lr=0.05", or "" for a class that reads no keys.
std::string listed(const std::vector<std::string>& keys) { return keys.empty() ? "" : ": " + join(keys); }

// A config key that names a class, and the classes it may name.
struct ClassKey {
  std::string key;   // "trainer.callbacks"
  std::string what;  // "callback", as unknown names are reported
  std::vector<std::string> names;
  std::function<void(const std::string& name, const Config&)> create;
  bool list = false;  // a list of entries (appended with +=), not one entry

  /// Modules and data modules read keys of their own section; the other classes read init_args.
  bool keyed() const { return key == "model" || key == "data"; }
  /// The section whose keys `create` reads.
  std::string section() const { return keyed() ? key : key + ".init_args"; }
  /// "callbacks", "strategy classes".
  std::string plural() const { return what + (what.back() == 's' ? "es" : "s"); }
};

// Every config key that names a class, in the order `arc modules` lists them.
std::vector<ClassKey> class_keys() {
  const auto stand_in = [] { return std::vector<torch::Tensor>{torch::zeros({1}).requires_grad_()}; };
  return {{"model", "module", module_registry().names(),
           [](const std::string& name, const Config& config) { module_registry().create(name, config); }},
          {"data", "data module", data_module_registry().names(),
           [](const std::string& name, const Config& config) { data_module_registry().create(name, config); }},
          {"trainer.callbacks", "callback", callback_registry().names(),
           [](const std::string& name, const Config& config) { callback_registry().create(name, config); }, true},
          {"trainer.logger", "logger", logger_registry().names(),
           [](const std::string& name, const Config& config) { logger_registry().create(name, config); }, true},
          {"optimizer", "optimizer", optimizer_registry().names(),
           [stand_in](const std::string& name, const Config& config) {
             optimizer_registry().create(name, stand_in(), config);
           }},
          {"lr_scheduler", "lr_scheduler", lr_scheduler_registry().names(),
           [stand_in](const std::string& name, const Config& config) {
             torch::optim::SGD sgd(stand_in(), torch::optim::SGDOptions(0.1));
             lr_scheduler_registry().create(name, sgd, config);
           }},
          // Lightning's classes that stand for trainer options here.
          {"trainer.strategy", "strategy class", strategy_class_names(),
           [](const std::string& name, const Config& config) { strategy_class(name, config); }},
          {"trainer.profiler", "profiler class", profiler_class_names(),
           [](const std::string& name, const Config& config) { profiler_class(name, config); }},
          {"trainer.plugins", "plugin", TrainerOptions::plugin_names(),
           [](const std::string& name, const Config& config) { TrainerOptions().apply_plugin(name, config); }, true}};
}

// The entry of class_keys() for `key` (LightningCLI's "model" is also Arclight's "module").
ClassKey class_key(const std::string& program, const std::string& key) {
  std::vector<std::string> keys;
  for (auto& known : class_keys()) {
    if (known.key == key || (key == "module" && known.key == "model")) return known;
    keys.push_back(known.key);
  }
  throw Error("--" + key + ".help: '" + key + "' names no class; --<key>.help <class> lists the init_args of a class " +
              "that one of these keys names: " + join(keys) + " (`" + program +
              " fit --help` lists the trainer's keys, `" + program + " modules` the modules')");
}

// `text` with the characters that would end a Markdown table's cell escaped.
std::string cell(std::string text) {
  for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) text.insert(at, "\\");
  return text;
}

// "`hidden=256`, `lr=0.05`", or "none" for a class that reads no keys.
std::string code_list(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "`" : ", `") + cell(key) + "`";
  return out;
}

}  // namespace

// Every trainer key with its default and help, from the table the parser reads, and the callbacks and
// loggers a config can name.
std::string trainer_keys_help() {
  std::ostringstream out;
  out << "Trainer keys (the config's trainer section, or --set trainer.<key>=<value>), with their defaults:\n";
  for (const auto& option : TrainerOptions::help()) {
    std::string head = "  trainer." + option.key + " = " + option.default_value.dump();
    head.resize(std::max<size_t>(head.size() + 1, 52), ' ');
    out << head << option.help << "\n";
  }
  out << "  trainer.callbacks                                 a list of {class_path, init_args} (or one; a class_path "
         "alone may be a string, and may be Lightning's import path): "
      << join(callback_registry().names()) << "\n";
  out << "  trainer.logger takes such entries too: " << join(logger_registry().names()) << "\n";
  out << "  --trainer.callbacks.help <class> lists a callback's init_args with their defaults; so do "
         "--trainer.logger.help, --model.help, --data.help, --optimizer.help, --lr_scheduler.help, "
         "--trainer.strategy.help, --trainer.profiler.help and --trainer.plugins.help\n";
  return out.str();
}

// The modules and data modules with the keys each reads, then the other classes a config can name,
// each kind with the flag that lists one's init_args.
int list_modules(const std::string& program) {
  for (const auto& known : class_keys()) {
    std::cout << known.plural()
              << (known.key == "model" ? " (the config keys each reads, with their defaults)"
                  : known.keyed()      ? ""
                                  : " (" + program + " fit --" + known.key + ".help <class> lists one's init_args)")
              << ":\n";
    if (!known.keyed()) {
      std::cout << "  " << join(known.names) << "\n";
      continue;
    }
    for (const auto& name : known.names) {
      const auto data = known.key == "model" ? default_data_module(name) : "";
      std::cout << "  " << name << (data.empty() ? "" : "  (data: " + data + ")")
                << listed(config_keys(known.section(), [&](const Config& config) { known.create(name, config); }))
                << "\n";
    }
  }
  return 0;
}

// jsonargparse's `--<key>.help <class>` (`request` is "trainer.callbacks=ModelCheckpoint"): the init_args
// the class reads, with their defaults, and how a command line and a config give them.
int class_help(const std::string& program, const std::string& request) {
  const size_t equals = request.find('=');
  const std::string key = request.substr(0, equals), class_path = request.substr(equals + 1);
  const auto known = class_key(program, key);
  ARC_CHECK(!class_path.empty(), "--", key, ".help needs a class: --", key, ".help <class>, one of ",
            join(known.names));
  const std::string name = detail::registered_name(class_path);
  ARC_CHECK(std::count(known.names.begin(), known.names.end(), name) > 0, "--", key,
            ".help: ", unknown_name_message(known.what, name, known.names));
  const auto keys = config_keys(known.section(), [&](const Config& config) { known.create(name, config); });
  std::cout << name << " (" << known.what << ")";
  if (keys.empty()) {
    std::cout << " takes no init_args\n";
    return 0;
  }
  std::cout << " init_args, with their defaults:\n";
  for (const auto& entry : keys) std::cout << "  " << entry << "\n";
  std::string entry = "{\"class_path\": \"" + name + "\", \"init_args\": {\"<key>\": <value>}}";
  if (known.list) entry = "[" + entry + "]";
  std::cout << "Give them on the command line: --" << key << (known.list ? "+=" : "=") << name << " --" << key
            << ".<key>=<value>\nor in a config: "
            << (key.rfind("trainer.", 0) == 0 ? "{\"trainer\": {\"" + key.substr(8) + "\": " + entry + "}}"
                                              : "{\"" + key + "\": " + entry + "}")
            << "\n";
  return 0;
}

int print_reference() {
  std::cout
      << "# Options reference\n\n"
         "Every key that a config, `--set` or a LightningCLI flag gives the `arc` tool, with its default. The\n"
         "trainer keys are also `arc::TrainerOptions`' setters of the same names in C++ "
         "([trainer.md](../trainer.md)),\n"
         "but for the DDP strategy's (timeout, collective_timeout, find_unused_parameters, static_graph,\n"
         "gradient_as_bucket_view, first_bucket_mb, bucket_cap_mb, shared_memory, process_group_backend), which "
         "are\n`TrainerOptions::ddp()`'s, and the SLURM environment's (auto_requeue, requeue_signal), which are\n"
         "`TrainerOptions::slurm()`'s. [cli.md](../cli.md) explains configs. This page is what\n"
         "`build/bin/arc reference` prints: run `scripts/docs.sh` to write it anew (the test suite fails while it\n"
         "differs).\n\n"
         "## Trainer\n\n| key | default | meaning |\n|---|---|---|\n";
  for (const auto& option : TrainerOptions::help())
    std::cout << "| `trainer." << option.key << "` | `" << cell(option.default_value.dump()) << "` | "
              << cell(option.help) << " |\n";
  for (const auto& known : class_keys()) {
    std::string heading = known.what == "lr_scheduler" ? "LR schedulers" : known.plural();
    heading[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(heading[0])));
    std::cout << "\n## " << heading << " (`" << known.key << "`)\n\n"
              << "| class | " << (known.keyed() ? "keys" : "init_args") << ", with their defaults |\n|---|---|\n";
    for (const auto& name : known.names)
      std::cout << "| `" << name << "` | "
                << code_list(config_keys(known.section(), [&](const Config& config) { known.create(name, config); }))
                << " |\n";
  }
  return 0;
}

}  // namespace arc::cli
