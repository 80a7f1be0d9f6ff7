// The command line that `arc` and programs of their own (arc::cli::run, arc::cli::main) run.
#include <arc/cli/cli.h>

#include <arc/base/class_path.h>
#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/detail/yaml.h>
#include <arc/base/error.h>
#include <arc/callbacks/callback_registry.h>
#include <arc/callbacks/on_exception_checkpoint.h>
#include <arc/callbacks/prediction_writer.h>
#include <arc/cli/config_file.h>
#include <arc/cli/detail/cli_help.h>
#include <arc/cli/detail/run_report.h>
#include <arc/core/callback.h>
#include <arc/core/module_registry.h>
#include <arc/core/optimizer_registry.h>
#include <arc/core/trainer.h>
#include <arc/core/tuner.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/sharded_checkpoint.h>
#include <arc/fabric/weights.h>
#include <arc/loggers/logger_registry.h>
#include <arc/strategies/detail/rank_processes.h>
#include <arc/strategies/strategy.h>
#include <arc/version.h>

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

namespace arc::cli {
namespace {

// The end of --help for a program that gives no examples of its own (CliOptions::examples).
std::string default_examples(const std::string& program, const std::string& module) {
  const std::string p = "  " + program;
  return "Examples:\n" + p + " fit --config run.yaml            train what run.yaml describes\n" + p +
         " fit --print_config > run.yaml    the resolved config, every default written out, to edit\n" + p +
         " fit --trainer.max_epochs=3 --data.batch_size 128   LightningCLI's flags (the same as --set)\n" + p +
         " fit --trainer.strategy=ddp_spawn --trainer.devices=2   two processes on this machine\n" + p +
         " validate --config run.yaml --ckpt last   one validation pass with the last checkpoint's weights\n" + p +
         " modules                          the registered modules and data modules, with their keys\n\n" +
         "A config (JSON, or YAML for .yaml and .yml) has the sections model (or module), data, trainer,\n" +
         "optimizer and lr_scheduler, as LightningCLI's" +
         (module.empty() ? std::string(".\n") : "; the model section's keys are " + module + "'s.\n");
}

// What a config section names, built and checked.
// The module section's init_weights: the file, the config key that named it, and the options.
struct InitWeights {
  std::string file;
  std::string key;
  LoadWeightsOptions options;
};

struct Experiment {
  std::shared_ptr<TrainModule> module;
  /// Weights to load into the module before a command runs (module.init_weights).
  std::optional<InitWeights> init_weights;
  std::shared_ptr<DataModule> data;
  TrainerOptions options;
  /// trainer.callbacks and trainer.logger entries, built.
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::vector<std::shared_ptr<Logger>> loggers;
  /// The config with the names chosen, every trainer option, and every init_arg of its entries
  /// (callbacks, loggers, module, data, optimizer, scheduler) with its default, as config.yaml saves it.
  nlohmann::json resolved;
  /// LightningCLI's top-level ckpt_path ("" when none): what --resume or --ckpt give, when they are not.
  std::string ckpt_path;
  /// LightningCLI's top-level verbose of validate and test: whether they print their table.
  std::optional<bool> verbose;
};

// Whether trainer.callbacks or trainer.logger `value` names objects (entries, lists of them, class_path
// strings) rather than being the logger's true or false.
bool names_objects(const nlohmann::json& value) { return value.is_structured() || value.is_string(); }

// LightningCLI's trainer.callbacks and trainer.logger ({class_path, init_args} entries) become
// objects; what is left of the section is TrainerOptions.
nlohmann::json take_objects(nlohmann::json trainer, Experiment& out) {
  if (!trainer.is_object()) return trainer;
  // null, as LightningCLI prints both by default, gives none: the default logger, no more callbacks.
  for (const char* key : {"callbacks", "logger"})
    if (const auto value = trainer.find(key); value != trainer.end() && value->is_null()) trainer.erase(value);
  if (const auto callbacks = trainer.find("callbacks"); callbacks != trainer.end()) {
    out.callbacks = callbacks_from_json(*callbacks, "trainer.callbacks", &out.resolved["trainer"]["callbacks"]);
    trainer.erase(callbacks);
  }
  if (const auto logger = trainer.find("logger"); logger != trainer.end() && names_objects(*logger)) {
    out.loggers = loggers_from_json(*logger, "trainer.logger", &out.resolved["trainer"]["logger"]);
    trainer.erase(logger);
  }
  return trainer;
}

// LightningCLI's top-level seed_everything: an integer is trainer.seed, true a seed chosen for the
// run (global_seed) unless the trainer has one, false or null none. Returns `trainer` with the seed set.
nlohmann::json with_seed_everything(nlohmann::json trainer, const nlohmann::json& value) {
  if (value.is_null() || value == false) return trainer;
  ARC_CHECK(value == true || (value.is_number_integer() && value.get<int64_t>() >= 0),
            "config key 'seed_everything' must be true, false or a non-negative integer, got ", value.dump());
  if (!trainer.is_object()) return trainer;
  const auto set = trainer.find("seed");
  const bool seeded = set != trainer.end() && !set->is_null();
  if (value == true) {
    if (!seeded) trainer["seed"] = global_seed();
    return trainer;
  }
  ARC_CHECK(!seeded || *set == value, "seed_everything (", value.dump(), ") and trainer.seed (",
            seeded ? set->dump() : "", ") disagree; set only one of them");
  trainer["seed"] = value;
  return trainer;
}

// Whether a module or data section is LightningCLI's {class_path, init_args} entry (or its
// class_path alone) rather than Arclight's {name, <options>}.
bool is_class_path_entry(const nlohmann::json& section) {
  return section.is_string() || (section.is_object() && section.contains("class_path"));
}

// What the module or data section `path` builds: the registered class its "name" gives (`fallback`
// when it gives none; "" makes the name required) with the section's other keys as its options, or
// LightningCLI's entry's class with its init_args. `resolved` gets the section with the class chosen
// and every option the class read, defaults included.
template <typename T>
std::shared_ptr<T> from_section(const Registry<T, const Config&>& registry, const nlohmann::json* section,
                                const std::string& path, const std::string& fallback, nlohmann::json& resolved) {
  if (section != nullptr && is_class_path_entry(*section))
    return detail::with_class_path(
        *section, path,
        [&](const std::string& class_name, const Config& init_args) { return registry.create(class_name, init_args); },
        &resolved);
  const bool named = section != nullptr && section->is_object() && section->contains("name");
  ARC_CHECK(named || !fallback.empty(), "the config names no ", path == "data" ? "data module" : "module",
            " and the program chooses none: give ", path, ".name (--", path, "=<name>) or a class_path, one of ",
            join(registry.names()));
  Config options(section ? *section : nlohmann::json::object(), path);
  const auto name = options.get<std::string>("name", fallback);
  auto built = registry.create(name, options);
  options.finish();
  resolved = section ? *section : nlohmann::json::object();
  resolved.update(options.defaults_taken());
  return built;
}

// The module section's init_weights (beside its keys, or among its init_args, where dotted flags
// put it), taken out of `section`; null when it has none.
nlohmann::json take_init_weights(nlohmann::json& section) {
  nlohmann::json taken;
  for (auto* holder :
       {&section, section.is_object() && section.contains("init_args") ? &section["init_args"] : nullptr})
    if (holder != nullptr && holder->is_object() && holder->contains("init_weights")) {
      taken = (*holder)["init_weights"];
      holder->erase("init_weights");
    }
  return taken;
}

// module.init_weights: the path of pretrained weights (safetensors, an index of shards, an Arclight
// checkpoint), or {path, strict, strip_prefix, add_prefix, rename: [[regex, replacement], ...],
// skip: [regex, ...], dtype}, read when the config is (so that --print_config checks it) and loaded
// into the module before a command runs (arc::load_weights).
InitWeights read_init_weights(const nlohmann::json& spec, const std::string& path) {
  Config config(spec.is_string() ? nlohmann::json{{"path", spec}} : spec, path);
  InitWeights out{config.require<std::string>("path"), path, {}};
  out.options.strict(config.get<bool>("strict", true))
      .strip_prefix(config.get<std::string>("strip_prefix", ""))
      .add_prefix(config.get<std::string>("add_prefix", ""))
      .skip(config.get<std::vector<std::string>>("skip", {}));
  for (const auto& rule : config.get<std::vector<std::vector<std::string>>>("rename", {})) {
    ARC_CHECK(rule.size() == 2, "config key '", path, ".rename' takes [regex, replacement] pairs, got a rule of ",
              rule.size(), " strings");
    out.options.rename().emplace_back(rule[0], rule[1]);
  }
  const std::map<std::string, torch::Dtype> dtypes = {{"float32", torch::kFloat},
                                                      {"float64", torch::kDouble},
                                                      {"bfloat16", torch::kBFloat16},
                                                      {"float16", torch::kHalf}};
  if (const auto dtype = config.get_optional<std::string>("dtype")) {
    const auto found = dtypes.find(*dtype);
    if (found == dtypes.end())
      throw Error(unknown_name_message(path + ".dtype", *dtype, {"float32", "float64", "bfloat16", "float16"}));
    out.options.dtype(found->second);
  }
  config.finish();
  return out;
}

// Loads the experiment's init_weights, if any, into its module.
void load_init_weights(const Experiment& experiment) {
  if (!experiment.init_weights) return;
  const auto& [file, key, options] = *experiment.init_weights;
  experiment.module->configure_model();  // its layers exist before they are filled
  const auto report = load_weights(*experiment.module, file, options);
  if (first_of_launch()) console().info("{} '{}':\n{}", key, file, report.summary());
}

// The class a resolved module or data section names.
std::string class_named(const nlohmann::json& resolved) {
  return detail::registered_name(resolved.value("class_path", resolved.value("name", std::string())));
}

// The module a config builds when it names none: the program's, else the only one registered, else
// none ("": the config must name one).
std::string default_module(const CliOptions& cli) {
  if (!cli.module().empty()) return cli.module();
  const auto names = module_registry().names();
  return names.size() == 1 ? names.front() : "";
}

// LightningCLI's link_arguments: each target key takes its source's value, as the config gave it or
// as its class's default. Sources are keys of the module and data sections; targets keys of the
// module, data and trainer sections, which the config may not set.
class Links {
 public:
  Links(const CliOptions& cli, const std::string& module_key, const nlohmann::json& config) {
    for (const auto& [source, target] : cli.link_arguments()) {
      links_.push_back({split(source, module_key, "source"), split(target, module_key, "target")});
      const auto& [section, key] = links_.back().target;
      const auto& from = links_.back().source.first;
      ARC_CHECK(from == module_key || from == "data", "link_arguments source '", source,
                "' is not a key of the model or data section");
      ARC_CHECK(section == module_key || section == "data" || section == "trainer", "link_arguments target '", target,
                "' is not a key of the model, data or trainer section");
      const auto& given = config.value(section, nlohmann::json::object());
      // A trainer_defaults value that nothing replaced is the program's, not the config's.
      const auto& defaults = cli.trainer_defaults();
      const bool defaulted = section == "trainer" && defaults.contains(key) && given.is_object() &&
                             given.value(key, nlohmann::json()) == defaults.at(key);
      const bool set = !defaulted && given.is_object() &&
                       (given.contains(key) || given.value("init_args", nlohmann::json::object()).contains(key));
      ARC_CHECK(!set, "config key '", section, ".", key, "' takes the value of '", source,
                "' (the program links them, as LightningCLI's link_arguments); set ", source, " instead");
    }
  }

  /// Whether the data section is built first: a module key takes a data key's value.
  bool data_first(const std::string& module_key) const {
    bool from_data = false, from_module = false;
    for (const auto& link : links_) {
      from_data = from_data || (link.source.first == "data" && link.target.first == module_key);
      from_module = from_module || (link.source.first == module_key && link.target.first == "data");
    }
    ARC_CHECK(!(from_data && from_module), "link_arguments link the model and data sections both ways; one section ",
              "must be built before the other: link them one way");
    return from_data;
  }

  /// Sets the targets whose source is in `section`, from its `resolved` config, into `sections`.
  void apply(const std::string& section, const nlohmann::json& resolved,
             const std::map<std::string, nlohmann::json*>& sections) const {
    for (const auto& [source, target] : links_) {
      if (source.first != section) continue;
      const auto& values = resolved.contains("init_args") ? resolved.at("init_args") : resolved;
      ARC_CHECK(values.contains(source.second), "link_arguments source '", source.first, ".", source.second,
                "' is not a key that ", class_named(resolved), " reads (it reads: ", join(keys_of(values)), ")");
      auto& into = *sections.at(target.first);
      if (into.is_null()) into = nlohmann::json::object();
      if (into.is_string()) into = {{"class_path", into}};
      (into.contains("class_path") ? into["init_args"] : into)[target.second] = values.at(source.second);
    }
  }

 private:
  using Key = std::pair<std::string, std::string>;  // section, key
  struct Link {
    Key source, target;
  };
  static Key split(const std::string& path, const std::string& module_key, const char* what) {
    const auto dot = path.find('.');
    ARC_CHECK(dot != std::string::npos && dot + 1 < path.size() && path.find('.', dot + 1) == std::string::npos,
              "link_arguments ", what, " '", path, "' must be <section>.<key>, such as data.batch_size");
    const std::string section = path.substr(0, dot);
    return {section == "model" || section == "module" ? module_key : section, path.substr(dot + 1)};
  }
  static std::vector<std::string> keys_of(const nlohmann::json& values) {
    std::vector<std::string> out;
    for (const auto& [key, value] : values.items()) out.push_back(key);
    return out;
  }
  std::vector<Link> links_;
};

// The class a module section names before it is built: its class_path or name, else the program's default.
std::string module_class(const nlohmann::json& section, const CliOptions& cli) {
  if (section.is_string() || (section.is_object() && (section.contains("class_path") || section.contains("name"))))
    return class_named(section.is_string() ? nlohmann::json{{"class_path", section}} : section);
  return default_module(cli);
}

Experiment build(const nlohmann::json& config_json, const CliOptions& cli) {
  Config root(config_json, "");
  Experiment out;
  // LightningCLI calls the module's section "model".
  const auto* module_json = root.find("module");
  const auto* model_json = root.find("model");
  ARC_CHECK(module_json == nullptr || model_json == nullptr,
            "the config has both 'module' and 'model' (LightningCLI's name for the same section); keep one of them");
  const std::string module_key = model_json != nullptr ? "model" : "module";
  const Links links(cli, module_key, config_json);
  out.resolved = config_json;
  auto& module_resolved = out.resolved[module_key];
  nlohmann::json module_section = model_json ? *model_json : module_json ? *module_json : nlohmann::json();
  const auto* data_json = root.find("data");
  const auto* trainer_json = root.find("trainer");
  nlohmann::json data_section = data_json ? *data_json : nlohmann::json();
  nlohmann::json trainer_section = trainer_json ? *trainer_json : nlohmann::json::object();
  const std::map<std::string, nlohmann::json*> sections = {
      {module_key, &module_section}, {"data", &data_section}, {"trainer", &trainer_section}};
  const auto init_weights = take_init_weights(module_section);
  const auto build_module = [&] {
    out.module = from_section(module_registry(), module_section.is_null() ? nullptr : &module_section, module_key,
                              default_module(cli), module_resolved);
    links.apply(module_key, module_resolved, sections);
  };
  const auto build_data = [&] {
    const auto fallback = cli.data().empty() ? default_data_module(module_class(module_section, cli)) : cli.data();
    out.data = from_section(data_module_registry(), data_section.is_null() ? nullptr : &data_section, "data", fallback,
                            out.resolved["data"]);
    links.apply("data", out.resolved["data"], sections);
  };
  if (links.data_first(module_key)) {
    build_data();
    build_module();
  } else {
    build_module();
    build_data();
  }
  if (!init_weights.is_null()) {
    out.init_weights = read_init_weights(init_weights, module_key + ".init_weights");
    module_resolved["init_weights"] = init_weights;
  }
  const auto* seed_everything = root.find("seed_everything");
  out.resolved["trainer"] = nlohmann::json::object();  // take_objects puts the callbacks and loggers there
  out.options = TrainerOptions::from_json(
      take_objects(with_seed_everything(trainer_section, seed_everything ? *seed_everything : nlohmann::json()), out));
  // LightningCLI's optimizer and lr_scheduler sections, for modules that take them (configured_optimizer).
  const auto* optimizer = root.find("optimizer");
  const auto* lr_scheduler = root.find("lr_scheduler");
  out.ckpt_path = root.get_optional<std::string>("ckpt_path").value_or("");
  out.verbose = root.get_optional<bool>("verbose");
  if (optimizer != nullptr || lr_scheduler != nullptr) {
    out.module->set_optimizer_config(optimizer ? *optimizer : nullptr, lr_scheduler ? *lr_scheduler : nullptr);
    if (optimizer != nullptr) out.resolved["optimizer"] = out.module->optimizer_config();
    if (lr_scheduler != nullptr) out.resolved["lr_scheduler"] = out.module->lr_scheduler_config();
  }
  root.finish();
  // Every trainer option, beside the callbacks and loggers entries that take_objects resolved.
  const auto options = out.options.to_json();
  for (const auto& [key, value] : options.items())
    if (!out.resolved["trainer"].contains(key)) out.resolved["trainer"][key] = value;
  // The seed that seed_everything chose, as LightningCLI saves it, so that config.yaml repeats the run.
  if (seed_everything != nullptr && out.options.seed()) out.resolved["seed_everything"] = *out.options.seed();
  return out;
}

// Writes the run's resolved config to <log_dir>/config.yaml (rank 0; nowhere without a logger), as
// LightningCLI's SaveConfigCallback does for every subcommand: fit's when it starts, after a resume
// has chosen the checkpoint's version; validate's, test's and predict's at setup.
class SaveConfig : public Callback {
 public:
  explicit SaveConfig(nlohmann::json config) : config_(std::move(config)) {}
  std::string state_key() const override { return "SaveConfig"; }

  void setup(Trainer& trainer, TrainModule&, Stage stage) override {
    if (stage != Stage::fit) write(trainer);
  }
  void on_fit_start(Trainer& trainer, TrainModule&) override { write(trainer); }

 private:
  void write(const Trainer& trainer) const {
    if (!trainer.is_global_zero() || trainer.loggers().empty()) return;
    const std::string dir = trainer.log_dir();
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    std::ofstream out(dir + "/config.yaml");
    out << to_yaml(config_);
    ARC_CHECK(!error && out.good(), "cannot write '", dir, "/config.yaml' (",
              error ? error.message() : std::string("write failed"),
              "); make default_root_dir writable or choose another");
  }

  nlohmann::json config_;
};

// Counts the predictions of every rank when predict ends, so that `arc predict` reports the run's
// (Trainer::predict returns each rank its own share).
class PredictionCount : public Callback {
 public:
  std::string state_key() const override { return "PredictionCount"; }

  void on_predict_batch_end(Trainer&, TrainModule&, const torch::Tensor& outputs, Batch&, int64_t) override {
    counts_[0] += 1;
    counts_[1] += !outputs.defined() ? 0 : outputs.dim() == 0 ? 1 : outputs.size(0);
  }
  void on_predict_end(Trainer& trainer, TrainModule&) override {
    const auto total = trainer.strategy().all_reduce(torch::tensor(counts_), Reduce::sum);
    counts_ = {total[0].item<int64_t>(), total[1].item<int64_t>()};
  }
  nlohmann::json result() const { return {{"batches", counts_[0]}, {"predictions", counts_[1]}}; }

 private:
  std::vector<int64_t> counts_{0, 0};  // batches, predictions
};

void print_result(const nlohmann::json& result) { std::cout << "RESULT " << result.dump() << std::endl; }

// arc export: the module weights of a checkpoint (or of another weights file) written as
// safetensors for other tools. "last" is the newest last.ckpt under the config's
// trainer.default_root_dir, where fit's default checkpointing keeps it.
int export_weights(const std::string& program, const nlohmann::json& config, const std::string& from,
                   const std::string& to, double max_shard_mb) {
  std::string source = from;
  if (from == "last") {
    const auto trainer = config.value("trainer", nlohmann::json::object());
    const auto root = trainer.is_object() ? trainer.value("default_root_dir", std::string(".")) : std::string(".");
    auto found = last_checkpoints(root + "/checkpoints", root + "/lightning_logs");
    ARC_CHECK(!found.empty(), program, " export --ckpt last: no last.ckpt in '", root, "/lightning_logs/version_*/",
              "checkpoints' or '", root, "/checkpoints' (trainer.default_root_dir); pass the checkpoint's path");
    source = newest_first(std::move(found)).front();
  }
  const auto reader = open_weights(source);
  StateDict state;
  for (const auto& entry : reader->entries()) state.emplace_back(entry.name, reader->read(entry));
  // A Lightning checkpoint takes the run's epoch, step and hyper-parameters where the source has
  // them (an Arclight checkpoint does); another file's metadata that does not parse is left out.
  const auto metadata = reader->metadata();
  const auto parsed = [&](const char* key) {
    const auto found = metadata.find(key);
    return found == metadata.end() ? nlohmann::json() : nlohmann::json::parse(found->second, nullptr, false);
  };
  const auto epoch = parsed("epoch"), step = parsed("global_step"), hparams = parsed("hparams");
  const auto files = save_weights(state, to,
                                  SaveWeightsOptions()
                                      .metadata(metadata)
                                      .max_shard_mb(max_shard_mb)
                                      .epoch(epoch.is_number_integer() ? epoch.get<int64_t>() : 0)
                                      .global_step(step.is_number_integer() ? step.get<int64_t>() : 0)
                                      .hyper_parameters(hparams.is_object() ? hparams : nlohmann::json::object()));
  print_result({{"from", source}, {"files", files}, {"tensors", state.size()}});
  return 0;
}

// arc consolidate: a sharded checkpoint as one file; without a name, beside the folder as
// <name>.consolidated.ckpt (Lightning's consolidate_checkpoint appends .consolidated; the .ckpt keeps
// it readable by every tool that tells formats by their suffix).
int consolidate_sharded(const std::string& program, const std::string& from, const std::string& to) {
  ARC_CHECK(std::filesystem::is_directory(from), program, " consolidate --ckpt '", from,
            "': not a sharded checkpoint's ", "folder; a checkpoint file is already one file");
  std::string folder = from;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  const std::string stem =
      std::filesystem::path(folder).extension() == ".ckpt" ? folder.substr(0, folder.size() - 5) : folder;
  const std::string target = to.empty() ? stem + ".consolidated.ckpt" : to;
  consolidate_checkpoint(from, target);
  print_result({{"from", from}, {"to", target}});
  return 0;
}

// LightningCLI's verbose belongs to validate and test; `command` is another.
void refuse_verbose(const std::string& command, const Experiment& experiment) {
  ARC_CHECK(!experiment.verbose, "config key 'verbose' (", *experiment.verbose ? "true" : "false",
            ") is validate's and test's (whether they print their table); ", command, " has none: remove it");
}

int train(const CliOptions& cli, const nlohmann::json& config, const std::string& resume) {
  auto experiment = build(config, cli);
  load_init_weights(experiment);
  refuse_verbose("fit", experiment);
  auto report = std::make_shared<RunReport>();
  auto callbacks = experiment.callbacks;
  callbacks.push_back(report);
  callbacks.push_back(std::make_shared<SaveConfig>(experiment.resolved));
  Trainer trainer(experiment.options, callbacks, experiment.loggers);
  // Ctrl-C (or any failure) during fit saves where the run stopped, to resume from with --resume.
  trainer.callbacks().push_back(std::make_shared<OnExceptionCheckpoint>(trainer.log_dir() + "/checkpoints"));
  trainer.fit(*experiment.module, *experiment.data, resume.empty() ? experiment.ckpt_path : resume);
  if (trainer.is_global_zero()) print_result(report->report(trainer, *experiment.module));
  return 0;
}

// `given_verbose`: --verbose, which wins over the config's.
int evaluate(const CliOptions& cli, const std::string& command, const nlohmann::json& config,
             const std::string& given_ckpt, std::optional<bool> given_verbose) {
  auto experiment = build(config, cli);
  load_init_weights(experiment);
  const std::string& ckpt = given_ckpt.empty() ? experiment.ckpt_path : given_ckpt;
  const bool verbose = given_verbose.value_or(experiment.verbose.value_or(true));
  if (command == "predict") refuse_verbose(command, experiment);
  auto callbacks = experiment.callbacks;
  callbacks.push_back(std::make_shared<SaveConfig>(experiment.resolved));
  const auto count = std::make_shared<PredictionCount>();
  if (command == "predict") callbacks.push_back(count);
  Trainer trainer(experiment.options, callbacks, experiment.loggers);
  nlohmann::json result;
  if (command == "validate") {
    result = trainer.validate(*experiment.module, *experiment.data, ckpt, verbose);
  } else if (command == "test") {
    result = trainer.test(*experiment.module, *experiment.data, ckpt, verbose);
  } else {
    trainer.predict(*experiment.module, *experiment.data, ckpt, /*return_predictions=*/false);
    result = count->result();
  }
  if (!trainer.is_global_zero()) return 0;
  // The module is built fresh from the config, so without a checkpoint its weights are untrained.
  if (ckpt.empty())
    console().warn(
        "{} {} ran without --ckpt, so with the module's initial, untrained weights; give --ckpt last (or "
        "a checkpoint file) to load trained ones",
        cli.program(), command);
  const auto writes = [](const auto& callback) { return dynamic_cast<BasePredictionWriter*>(callback.get()); };
  if (command == "predict" && std::none_of(callbacks.begin(), callbacks.end(), writes))
    console().info(
        "the predictions were not saved (no PredictionWriter among the callbacks); to write them to files, add "
        "--trainer.callbacks+=PredictionWriter "
        "--trainer.callbacks.output_dir=<folder> (or a PredictionWriter entry in the config's trainer.callbacks)");
  print_result(result);
  return 0;
}

// What `arc lr_find` and `arc scale_batch_size` take besides the config.
struct TuneArgs {
  LRFinderOptions lr;
  BatchSizeOptions batch;
  std::string csv, svg;
};

// The Tuner runs in one process, as Lightning's: a run the config spreads over several devices or
// nodes is tuned on its first device.
TrainerOptions single_process(TrainerOptions options) {
  const auto& devices = options.devices();
  if (!devices.is_auto && devices.count == 1) return options.num_nodes(1);
  // "auto" and -1 may mean every GPU of the machine.
  if (devices.known_count() != 1)
    console().info("tuning in one process on the first device; fit uses every device the config names");
  options.strategy("auto").num_nodes(1);
  return devices.indices.empty() ? options.devices(1) : options.devices(Devices({devices.indices.front()}));
}

int tune(const CliOptions& cli, const std::string& command, const nlohmann::json& config, const TuneArgs& args) {
  auto experiment = build(config, cli);
  load_init_weights(experiment);
  // The trials run without callbacks or loggers, and leave no log folder.
  Trainer trainer(single_process(experiment.options).logger(false));
  Tuner tuner(trainer);
  nlohmann::json result;
  if (command == "lr_find") {
    const auto found = tuner.lr_find(*experiment.module, *experiment.data, args.lr);
    if (!args.csv.empty()) found.write_csv(args.csv);
    if (!args.svg.empty()) found.write_svg(args.svg);
    const auto suggestion = found.suggestion();
    result = {{"suggested_lr", suggestion ? nlohmann::json(*suggestion) : nlohmann::json()},
              {"steps", found.lrs().size()}};
  } else {
    result = {{"batch_size", tuner.scale_batch_size(*experiment.module, *experiment.data, args.batch)}};
  }
  print_result(result);
  return 0;
}

// Prints "<program>: <kind>: <message>" and returns `code`; a rank that the `arc` tool started hands
// it to the tool instead (kSpawnErrorPipeVariable), which prints each distinct error of its ranks once.
int fail(const std::string& program, const std::string& kind, const std::string& message, int code) {
  if (!report_to_launcher(kind, message)) std::cerr << program << ": " << kind << ": " << message << std::endl;
  return code;
}

// The names `command`'s options go by on a command line (--config, -c, ...), hidden ones left out.
std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const auto* option : command.get_options()) {
    if (option->get_group().empty()) continue;  // hidden: --class_help, which --<key>.help becomes
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// CLI11's usage errors ("A subcommand is required", "The following arguments were not expected:
// x --confg", exit codes 106 and 109), said as the tool's other errors are: the word that is wrong,
// the nearest right one, and where the right ones are listed.
std::string usage_error(const std::string& program, const std::vector<CLI::App*>& commands,
                        const std::vector<std::string>& args, const CLI::ParseError& error) {
  std::vector<std::string> names;
  for (const auto* command : commands) {
    names.push_back(command->get_name());
    for (const auto& alias : command->get_aliases()) names.push_back(alias);
  }
  if (args.empty() || args[0].rfind('-', 0) == 0)
    return "no subcommand given" + (args.empty() ? std::string() : " before '" + args[0] + "'") +
           "; the first argument is one of " + join(names) + " (" + program + " --help says what each does)";
  const auto found = std::find_if(commands.begin(), commands.end(),
                                  [&](const CLI::App* command) { return command->check_name(args[0]); });
  if (found == commands.end())
    return unknown_name_message("subcommand", args[0], names) + " (" + program + " --help says what each does)";
  const std::string command = program + " " + args[0];
  const auto options = option_names(**found);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    const bool is_option =
        name.size() > 1 && name[0] == '-' && !std::isdigit(static_cast<unsigned char>(name[1])) && name[1] != '.';
    if (is_option && std::find(options.begin(), options.end(), name) == options.end())
      return command + ": " + unknown_name_message("option", name, options);
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr && !(*found)->remaining().empty()) {
    std::vector<std::string> extra;
    for (const auto& arg : (*found)->remaining()) extra.push_back("'" + arg + "'");
    return command + ": unexpected argument " + join(extra) +
           "; it takes options only, such as --config FILE and --set section.key=value (" + command +
           " --help lists them)";
  }
  std::string message = error.what();
  if (!message.empty()) message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return command + ": " + message + " (" + command + " --help lists its options)";
}

}  // namespace
}  // namespace arc::cli

namespace arc::detail {

std::string class_name(const std::type_info& type) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                         std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  // Template arguments keep their namespaces: only the class's own are dropped.
  const auto scope = name.rfind("::", name.find('<'));
  return scope == std::string::npos ? name : name.substr(scope + 2);
}

}  // namespace arc::detail

namespace arc::cli {

int run(int argc, char** argv, const CliOptions& options) {
  CliOptions cli = options;
  if (cli.program().empty()) cli.program(argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "arc");
  const auto& program = cli.program();
  CLI::App app(program + ": train LibTorch modules with Arclight", program);
  app.footer(cli.examples().empty() ? default_examples(program, cli.module()) : cli.examples());
  app.require_subcommand(1);
  app.set_version_flag("--version", program + " (Arclight) " + version(), "print the version and exit");
  std::string ckpt;
  std::optional<bool> verbose;
  std::vector<std::string> config_paths, overrides;
  bool print_config = false;
  std::vector<CLI::App*> runs;
  // Every command that runs a config reads it from the same options.
  std::string class_help_request;
  const auto add_config_options = [&](CLI::App* command) {
    // --trainer.callbacks.help ModelCheckpoint, as with_dotted_flags writes it; listed in the footer.
    command->add_option("--class_help", class_help_request)->group("");
    command->add_option("--config,-c", config_paths,
                        "config file, JSON or YAML (.yaml, .yml); give several to merge them, later ones winning");
    command->add_option("--set,-s", overrides,
                        "override one key: section.key=value (JSON or text), after the files; LightningCLI's "
                        "--section.key=value and --section.key value are the same, and "
                        "--trainer.callbacks+=<class> appends an entry whose init_args the keys after it set");
    command->add_flag(
        "--print_config", print_config,
        "print the resolved config (every trainer option and init_arg) as YAML and exit; feeding it back with "
        "--config reproduces the run");
  };
  for (const char* name : {"fit", "validate", "test", "predict"}) {
    auto* command = app.add_subcommand(name, std::string(name) + " a registered module as the config says");
    add_config_options(command);
    if (std::string(name) == "fit") {
      // LightningCLI's name; `train` stays as it was.
      command->alias("train");
      command->add_option("--resume,--ckpt_path", ckpt,
                          "continue exactly from a checkpoint: a path, \"last\" (before any last.ckpt: start afresh) "
                          "or \"best\" (--ckpt_path: LightningCLI's name)");
    } else {
      command->add_option("--ckpt,--ckpt_path", ckpt,
                          "load the weights of this checkpoint (a path, \"last\", \"best\" or \"hpc\") first "
                          "(--ckpt_path: LightningCLI's name)");
    }
    if (std::string(name) == "validate" || std::string(name) == "test")
      command->add_option_function<bool>(
          "--verbose", [&](const bool& value) { verbose = value; },
          "print the table of metrics before RESULT: true (the default) or false; the config's top-level verbose "
          "says the same");
    command->footer(trainer_keys_help());
    runs.push_back(command);
  }
  TuneArgs tune_args;
  auto* lr_find = app.add_subcommand(
      "lr_find", "the learning-rate range test (Lightning's Tuner.lr_find) on the config's module and data");
  auto* scale_batch_size = app.add_subcommand(
      "scale_batch_size", "the largest batch size whose training steps fit in memory (Tuner.scale_batch_size)");
  for (auto* command : {lr_find, scale_batch_size}) {
    add_config_options(command);
    command->footer("Prints RESULT {...} with what it found; the module's weights are left as they were.");
  }
  auto& lr = tune_args.lr;
  lr_find->add_option_function<double>(
      "--min_lr", [&lr](double v) { lr.min_lr(v); }, "first rate (1e-8)");
  lr_find->add_option_function<double>(
      "--max_lr", [&lr](double v) { lr.max_lr(v); }, "last rate (1)");
  lr_find->add_option_function<int64_t>(
      "--num_training", [&lr](int64_t v) { lr.num_training(v); }, "optimizer steps of the sweep (100)");
  lr_find->add_option_function<std::string>(
      "--mode", [&lr](const std::string& v) { lr.mode(v); }, "exponential (default) or linear");
  lr_find->add_option_function<double>(
      "--early_stop_threshold", [&lr](double v) { lr.early_stop_threshold(v); },
      "stop when the smoothed loss passes this many times its best (4; <= 0: never)");
  lr_find->add_option("--csv", tune_args.csv, "write the curve as lr,loss rows to this file");
  lr_find->add_option("--svg", tune_args.svg, "plot the curve with the suggestion to this SVG file");
  auto& batch = tune_args.batch;
  scale_batch_size->add_option_function<std::string>(
      "--mode", [&batch](const std::string& v) { batch.mode(v); }, "power (default: doubling) or binsearch");
  scale_batch_size->add_option_function<int64_t>(
      "--steps_per_trial", [&batch](int64_t v) { batch.steps_per_trial(v); }, "optimizer steps per size (3)");
  scale_batch_size->add_option_function<int64_t>(
      "--init_val", [&batch](int64_t v) { batch.init_val(v); }, "first size tried (2)");
  scale_batch_size->add_option_function<int64_t>(
      "--max_trials", [&batch](int64_t v) { batch.max_trials(v); }, "sizes tried at most (25)");
  scale_batch_size->add_option_function<double>(
      "--margin", [&batch](double v) { batch.margin(v); }, "binsearch: lower the size found by this fraction (0.05)");
  scale_batch_size->add_option_function<int64_t>(
      "--max_val", [&batch](int64_t v) { batch.max_val(v); }, "largest size tried (8192)");
  std::string export_to;
  double max_shard_mb = 0;
  auto* export_command = app.add_subcommand(
      "export",
      "write a checkpoint's module weights as safetensors, .pt or a Lightning .ckpt, for PyTorch, Hugging "
      "Face, Lightning and other tools");
  export_command
      ->add_option("--ckpt,--ckpt_path", ckpt,
                   "the checkpoint: a path, or \"last\" (the newest last.ckpt under the config's "
                   "trainer.default_root_dir); also any weights file that module.init_weights reads")
      ->required();
  export_command
      ->add_option("--to", export_to,
                   "the file to write, its format by its suffix: <name>.safetensors, <name>.pt (torch.save's "
                   "format) or <name>.ckpt (Lightning's checkpoint, for load_from_checkpoint)")
      ->required();
  export_command->add_option("--max_shard_mb", max_shard_mb,
                             "largest shard in MiB: above it, Hugging Face's shards and index (0: one file)");
  export_command->add_option("--config,-c", config_paths, "config files, for trainer.default_root_dir");
  export_command->add_option("--set,-s", overrides, "override one key: section.key=value");
  std::string consolidate_from, consolidate_to;
  auto* consolidate = app.add_subcommand(
      "consolidate",
      "write a sharded checkpoint (a folder: fsdp's state_dict_type \"sharded\") as one checkpoint file, which "
      "resumes and loads as the folder does");
  consolidate->add_option("--ckpt,--ckpt_path", consolidate_from, "the sharded checkpoint's folder")->required();
  consolidate->add_option("--to", consolidate_to,
                          "the file to write (<name>.consolidated.ckpt beside the folder when not given)");
  auto* modules = app.add_subcommand(
      "modules",
      "list registered modules and data modules, with the config keys each reads, then the callbacks, loggers, "
      "optimizers and schedulers");
  // The commands that read a config, and then the rest.
  std::vector<CLI::App*> configured = runs;
  configured.insert(configured.end(), {lr_find, scale_batch_size});
  auto* reference = app.add_subcommand(
      "reference", "print every key a config may set, with its default, as Markdown (docs/reference/options.md)");
  std::vector<std::string> args;
  try {
    args = with_dotted_flags({argv + 1, argv + argc});
  } catch (const Error& error) {
    return fail(program, "error", error.what(), 2);
  }
  std::vector<char*> rewritten = {argv[0]};
  for (auto& arg : args) rewritten.push_back(arg.data());
  try {
    app.parse(static_cast<int>(rewritten.size()), rewritten.data());
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help
    std::vector<CLI::App*> commands = configured;
    commands.insert(commands.end(), {export_command, consolidate, modules, reference});
    return fail(program, "error", usage_error(program, commands, args, error), 2);
  }
  LoadedConfig loaded;
  try {
    const auto environment = cli.default_env() ? environment_defaults(cli.env_prefix()) : EnvironmentDefaults();
    ARC_CHECK(cli.trainer_defaults().is_object(), "CliOptions trainer_defaults must be an object of trainer keys, got ",
              cli.trainer_defaults().dump());
    const nlohmann::json base = {{"trainer", cli.trainer_defaults()}};
    if (modules->parsed()) return list_modules(program);
    if (reference->parsed()) return print_reference();
    if (!class_help_request.empty()) return class_help(program, class_help_request);
    if (export_command->parsed()) {
      loaded = load_config(config_paths, overrides, environment, base);
      return export_weights(program, loaded.config, ckpt, export_to, max_shard_mb);
    }
    if (consolidate->parsed()) return consolidate_sharded(program, consolidate_from, consolidate_to);
    for (auto* command : configured) {
      if (!command->parsed()) continue;
      loaded = load_config(config_paths, overrides, environment, base);
      if (print_config) {
        std::cout << to_yaml(build(loaded.config, cli).resolved);
        return 0;
      }
      const auto name = command->get_name();
      if (command == lr_find || command == scale_batch_size) return tune(cli, name, loaded.config, tune_args);
      return name == "fit" ? train(cli, loaded.config, ckpt) : evaluate(cli, name, loaded.config, ckpt, verbose);
    }
  } catch (const Error& error) {
    return fail(program, "error", loaded.locate(error.what()), 2);
  } catch (const std::exception& error) {
    return fail(program, "failed", message_of(error), 1);
  }
  return 0;
}

}  // namespace arc::cli
