// TrainerOptions from and to JSON, and the checks on impossible values.
#include <arc/core/trainer_options.h>

#include <arc/base/class_path.h>
#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/fabric/precision.h>
#include <arc/profilers/profiler.h>
#include <arc/strategies/detail/lightning_strategy.h>
#include <arc/strategies/strategy.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace arc {
namespace {

const std::vector<std::string> kClipAlgorithms = {"norm", "value"};
const std::vector<std::string> kEvenBatches = {"error", "pad", "drop"};

BatchAmount read_amount(const Config& config, const std::string& key, BatchAmount fallback) {
  const auto* value = config.find(key);
  if (value == nullptr || value->is_null()) return fallback;
  ARC_CHECK(value->is_number() && value->get<double>() >= 0, "config key '", config.qualified(key),
            "' must be a fraction in [0.0, 1.0] (a JSON float) or a batch count (a JSON integer), got ", value->dump());
  if (value->is_number_integer()) return BatchAmount::count(value->get<int64_t>());
  const double fraction = value->get<double>();
  ARC_CHECK(fraction <= 1.0, "config key '", config.qualified(key),
            "' is a fraction of the batches and must be <= 1.0, got ", value->dump(), "; write an integer such as ",
            static_cast<int64_t>(fraction), " for a batch count");
  return BatchAmount::fraction(fraction);
}

nlohmann::json amount_json(const BatchAmount& amount) {
  if (amount.is_time) return {{"seconds", amount.value}};
  if (amount.is_fraction) return amount.value;
  return static_cast<int64_t>(amount.value);
}

std::optional<double> read_max_time(const Config& config) { return config.duration("max_time"); }

// A batch amount, or a duration in max_time's forms.
BatchAmount read_val_check_interval(const Config& config) {
  const auto* value = config.find("val_check_interval");
  if (value != nullptr && (value->is_string() || value->is_object()))
    return BatchAmount::duration(*config.duration("val_check_interval"));
  return read_amount(config, "val_check_interval", BatchAmount());
}

Determinism read_deterministic(const Config& config) {
  const auto* value = config.find("deterministic");
  if (value == nullptr || value->is_null()) return {};
  if (value->is_boolean()) return value->get<bool>();
  ARC_CHECK(*value == "warn", "config key '", config.qualified("deterministic"),
            "' must be true, false or \"warn\", got ", value->dump());
  return Determinism("warn");
}

int64_t read_fast_dev_run(const Config& config) {
  const auto* value = config.find("fast_dev_run");
  if (value == nullptr || value->is_null()) return 0;
  if (value->is_boolean()) return value->get<bool>() ? 1 : 0;
  ARC_CHECK(value->is_number_integer(), "config key '", config.qualified("fast_dev_run"),
            "' must be true, false or a batch count, got ", value->dump());
  return value->get<int64_t>();
}

bool read_barebones(const Config& config) { return config.get_optional<bool>("barebones").value_or(false); }

// Under barebones, what may cost speed stays off: the option that is on, or "".
std::string barebones_conflict(const TrainerOptions& o) {
  if (o.enable_checkpointing()) return "enable_checkpointing=true";
  if (o.logger()) return "logger=true";
  if (o.enable_progress_bar()) return "enable_progress_bar=true";
  if (o.enable_model_summary()) return "enable_model_summary=true";
  if (o.num_sanity_val_steps() != 0) return "num_sanity_val_steps=" + std::to_string(o.num_sanity_val_steps());
  if (o.fast_dev_run() != 0) return "fast_dev_run=" + std::to_string(o.fast_dev_run());
  if (o.detect_anomaly()) return "detect_anomaly=true";
  if (!o.profiler().name.empty()) return "profiler=\"" + o.profiler().name + "\"";
  return "";
}

std::string read_precision(const Config& config) {
  const auto* value = config.find("precision");
  if (value == nullptr || value->is_null()) return "32-true";
  if (value->is_number_integer()) return std::to_string(value->get<int64_t>());
  ARC_CHECK(value->is_string(), "config key '", config.qualified("precision"),
            "' must be a string such as \"32-true\", got ", value->dump());
  return value->get<std::string>();
}

// A profiler's name, or one of Lightning's profiler classes with its init_args.
ProfilerSpec read_profiler(const Config& config) {
  const auto* value = config.find("profiler");
  if (value == nullptr || value->is_null()) return {};
  if (value->is_string() && !detail::names_a_class(*value)) return value->get<std::string>();
  ARC_CHECK(value->is_string() || value->is_object(), "config key '", config.qualified("profiler"),
            "' must be a profiler's name or a {class_path, init_args} entry, got ", value->dump());
  return detail::with_class_path(*value, config.qualified("profiler"), profiler_class);
}

// Sets `key` to `value` for a plugin, unless the trainer section sets it otherwise itself.
template <typename T>
void set_by_plugin(const Config& config, const std::string& plugin, const char* key, const T& value, T& field) {
  const auto* own = config.find(key);
  ARC_CHECK(own == nullptr || own->is_null() || *own == nlohmann::json(value), "config key '", config.qualified(key),
            "' is ", own == nullptr ? "" : own->dump(), ", but the plugin ", plugin, " sets ", key, " to ",
            nlohmann::json(value).dump(), "; drop one of them");
  field = value;
}

// Lightning's cluster environment plugins and the cluster_environment each stands for; the other
// plugins apply_plugin takes.
const std::map<std::string, std::string> kEnvironmentPlugins = {
    {"LightningEnvironment", "local"}, {"SLURMEnvironment", "slurm"}, {"TorchElasticEnvironment", "torchelastic"},
    {"MPIEnvironment", "mpi"},         {"LSFEnvironment", "lsf"},     {"KubeflowEnvironment", "kubeflow"}};
const std::vector<std::string> kOtherPlugins = {"MixedPrecision",    "HalfPrecision",     "DoublePrecision",
                                                "Precision",         "AsyncCheckpointIO", "TorchCheckpointIO",
                                                "TorchSyncBatchNorm"};

// One of Lightning's plugins: each stands for trainer options here. Cluster environments set
// cluster_environment (SLURMEnvironment also auto_requeue and requeue_signal), precision plugins
// precision, AsyncCheckpointIO async_checkpointing, TorchSyncBatchNorm sync_batchnorm. Returns the
// plugin's kind, of which a config may name one.
std::string apply_plugin(const Config& config, const std::string& name, const Config& init_args, TrainerOptions& o) {
  if (const auto found = kEnvironmentPlugins.find(name); found != kEnvironmentPlugins.end()) {
    set_by_plugin(config, name, "cluster_environment", found->second, o.cluster_environment());
    if (name == "SLURMEnvironment") {
      set_by_plugin(config, name, "auto_requeue", init_args.get<bool>("auto_requeue", true), o.slurm().auto_requeue());
      set_by_plugin(config, name, "requeue_signal", init_args.get<std::string>("requeue_signal", "SIGUSR1"),
                    o.slurm().requeue_signal());
    }
    return "cluster environment";
  }
  if (name == "MixedPrecision" || name == "HalfPrecision") {
    // MixedPrecision names its precision, HalfPrecision's is "16-true" unless given. Their autocast
    // device is the accelerator's here, as in Lightning's Trainer, so `device` changes nothing.
    const auto precision = name == "MixedPrecision" ? init_args.require<std::string>("precision")
                                                    : init_args.get<std::string>("precision", "16-true");
    init_args.get<std::string>("device", "");
    check_choice("precision", precision, Precision::names());  // named in the plugin's entry
    set_by_plugin(config, name, "precision", precision, o.precision());
    return "precision";
  }
  if (name == "DoublePrecision" || name == "Precision") {
    set_by_plugin(config, name, "precision", std::string(name == "Precision" ? "32-true" : "64-true"), o.precision());
    return "precision";
  }
  if (name == "AsyncCheckpointIO") {
    set_by_plugin(config, name, "async_checkpointing", true, o.async_checkpointing());
    return "checkpoint io";
  }
  // Lightning's default checkpoint writer, as Arclight's.
  if (name == "TorchCheckpointIO") return "checkpoint io";
  if (name == "TorchSyncBatchNorm") {
    set_by_plugin(config, name, "sync_batchnorm", true, o.sync_batchnorm());
    return "layer sync";
  }
  throw Error(unknown_name_message("plugin", name, TrainerOptions::plugin_names()) +
              "; Arclight's other behaviour is set by trainer options (see arc fit --help)");
}

// Lightning's trainer.plugins: one entry or a list of {class_path, init_args}; null is none.
void read_plugins(const Config& config, TrainerOptions& o) {
  const auto* list = config.find("plugins");
  if (list == nullptr || list->is_null()) return;
  const auto path = config.qualified("plugins");
  ARC_CHECK(list->is_array() || list->is_object() || list->is_string(), "config key '", path,
            "' must be a list of {class_path, init_args} entries (or one entry), got ", list->dump());
  const auto entries = list->is_array() ? *list : nlohmann::json::array({*list});
  std::map<std::string, std::string> kinds;  // kind -> the entry that gave it
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto entry = path + "[" + std::to_string(i) + "]";
    const auto kind = detail::with_class_path(entries[i], entry, [&](const std::string& name, const Config& init_args) {
      return apply_plugin(config, name, init_args, o);
    });
    const auto [earlier, first] = kinds.emplace(kind, entry);
    ARC_CHECK(first, "config keys '", earlier->second, "' and '", entry, "' are both ", kind,
              " plugins; keep one of them");
  }
}

void check_amount(const char* key, const BatchAmount& amount, bool duration_allowed = false) {
  ARC_CHECK(!amount.is_time || duration_allowed, key, " takes batches (a fraction or a count), not a duration of ",
            amount.value, " s; only val_check_interval and max_time take durations");
  ARC_CHECK(amount.value >= 0 && (!amount.is_fraction || amount.value <= 1.0), key,
            " must be a fraction in [0.0, 1.0] or a batch count >= 0, got ", amount.value);
}

// One row per option: its key, how it is read from JSON, written back and checked. from_json,
// to_json and validate all walk this table, so that none of them can miss an option.
struct OptionField {
  const char* key;
  const char* help;
  void (*read)(const Config&, TrainerOptions&);
  nlohmann::json (*write)(const TrainerOptions&);
  void (*check)(const TrainerOptions&);
  // For an option kept in an option group: the key that sets it in configs ("strategy" for
  // DDPStrategyOptions, "plugins" for SlurmEnvironmentOptions), whose init_args take it. Its own
  // key is an alias that still reads, with a warning.
  const char* home = nullptr;
};

const std::vector<OptionField>& option_fields();

// trainer.strategy: a strategy's name, or one of Lightning's strategy classes, which sets the
// options it stands for unless the trainer section sets them otherwise itself ("auto" gives way).
void read_strategy(const Config& config, TrainerOptions& o) {
  const auto* value = config.find("strategy");
  if (value == nullptr || !is_strategy_class(*value)) return config.read("strategy", o.strategy());
  const auto path = config.qualified("strategy");
  const auto options = strategy_class_options(*value, path);
  o.strategy(options["strategy"].get<std::string>());
  const Config given(options, path);
  for (const auto& field : option_fields()) {
    const std::string key = field.key;
    if (key == "strategy" || !options.contains(key)) continue;
    const auto* own = config.find(key);
    ARC_CHECK(own == nullptr || own->is_null() || *own == "auto" || *own == options[key], "config key '",
              config.qualified(key), "' is ", own->dump(), ", but ", path, " sets ", key, " to ", options[key].dump(),
              "; drop one of them");
    field.read(given, o);
  }
}

// null leaves an option at its default, as None does in Lightning (LightningCLI prints every unset
// option so); an optional option's null unsets it, which is its own setting for some
// (check_val_every_n_epoch). Config::read does both.
template <typename T>
void read_value(const Config& config, const char* key, T& field) {
  config.read(key, field);
}
void read_value(const Config& config, const char* key, BatchAmount& field) { field = read_amount(config, key, field); }
void read_value(const Config& config, const char* key, Devices& field) {
  if (const auto* value = config.find(key); value != nullptr && !value->is_null())
    field = Devices::from_json(*value, config.qualified(key));
}

template <typename T>
nlohmann::json write_value(const T& value) {
  return value;
}
template <typename T>
nlohmann::json write_value(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}
nlohmann::json write_value(const BatchAmount& amount) { return amount_json(amount); }
nlohmann::json write_value(const Determinism& determinism) {
  return determinism.warn_only ? nlohmann::json("warn") : nlohmann::json(determinism.on);
}
nlohmann::json write_value(const Devices& devices) { return devices.to_json(); }
// The name alone, or the class whose init_args say the rest.
nlohmann::json write_value(const ProfilerSpec& spec) {
  if (spec.name_only()) return spec.name;
  nlohmann::json args = nlohmann::json::object();
  if (!spec.dirpath.empty()) args["dirpath"] = spec.dirpath;
  if (!spec.filename.empty()) args["filename"] = spec.filename;
  if (spec.row_limit) args["row_limit"] = *spec.row_limit;
  if (!spec.chrome_trace) args["export_to_chrome"] = false;
  return {{"class_path", spec.name == "simple" ? "SimpleProfiler" : "PyTorchProfiler"}, {"init_args", args}};
}

void no_check(const TrainerOptions&) {}

// clang-format off
// A row whose value reads and writes by its type; `check` throws for an impossible value.
#define ARC_OPTION(name, help, check)                                                          \
  OptionField{#name, help,                                                                     \
              [](const Config& config, TrainerOptions& o) { read_value(config, #name, o.name()); }, \
              [](const TrainerOptions& o) { return write_value(o.name()); }, check}
// A row with its own reader, for the keys that take several JSON forms.
#define ARC_OPTION_READ(name, help, reader, check)                                               \
  OptionField{#name, help, [](const Config& config, TrainerOptions& o) { o.name(reader(config)); }, \
              [](const TrainerOptions& o) { return write_value(o.name()); }, check}
// A row of an option kept in an option group, set in configs by the init_args of the `home` key's
// entry; its own key is an alias (ARC_DDP_OPTION: DDPStrategyOptions, in trainer.strategy;
// ARC_SLURM_OPTION: SlurmEnvironmentOptions, in trainer.plugins' SLURMEnvironment).
#define ARC_GROUP_OPTION(group, home, name, help)                                                      \
  OptionField{#name, help,                                                                             \
              [](const Config& config, TrainerOptions& o) { read_value(config, #name, o.group().name()); }, \
              [](const TrainerOptions& o) { return write_value(o.group().name()); }, no_check, home}
#define ARC_DDP_OPTION(name, help) \
  ARC_GROUP_OPTION(ddp, "strategy", name, help " (alias: set it in trainer.strategy's init_args)")
#define ARC_SLURM_OPTION(name, help) \
  ARC_GROUP_OPTION(slurm, "plugins", name, help " (alias: set it in trainer.plugins' SLURMEnvironment)")
#define ARC_AMOUNT_OPTION(name, help) \
  ARC_OPTION(name, help, [](const TrainerOptions& o) { check_amount(#name, o.name()); })
// clang-format on

// The settings kept in the option group of `home` ("strategy", "plugins") that differ from their
// defaults, by key.
nlohmann::json group_settings(const TrainerOptions& o, const std::string& home) {
  const TrainerOptions defaults;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& field : option_fields())
    if (field.home != nullptr && field.home == home && field.write(o) != field.write(defaults))
      out[field.key] = field.write(o);
  return out;
}

// The strategy's name, or, where DDP settings differ from their defaults, its entry with them as
// init_args: {class_path: ddp_spawn, init_args: {timeout: 60}}; "auto" is Lightning's DDPStrategy,
// whose default start_method makes the same choice.
nlohmann::json strategy_entry(const TrainerOptions& o, const nlohmann::json& init_args) {
  if (init_args.empty()) return o.strategy();
  return {{"class_path", o.strategy() == "auto" ? "DDPStrategy" : o.strategy()}, {"init_args", init_args}};
}
nlohmann::json write_strategy(const TrainerOptions& o) { return strategy_entry(o, group_settings(o, "strategy")); }

nlohmann::json slurm_plugin(const nlohmann::json& init_args) {
  return nlohmann::json::array({{{"class_path", "SLURMEnvironment"}, {"init_args", init_args}}});
}
// SLURM's settings that differ from their defaults, as Lightning's SLURMEnvironment plugin, which
// also sets cluster_environment to slurm: where that is the option already; else null (SLURM's keys
// are then written themselves, by to_json).
nlohmann::json write_plugins(const TrainerOptions& o) {
  const auto settings = group_settings(o, "plugins");
  return settings.empty() || o.cluster_environment() != "slurm" ? nlohmann::json(nullptr) : slurm_plugin(settings);
}

// Whether to_json writes a row's own key: every row's but the option groups', which their home's
// entry holds, and SLURM's settings beside another cluster environment (write_plugins).
bool written_by_key(const OptionField& field, const TrainerOptions& o) {
  if (field.home == nullptr) return true;
  return std::string(field.home) == "plugins" && write_plugins(o).is_null() && !group_settings(o, "plugins").empty();
}

// The warning for an alias key that a config sets, naming its spelling in its home's entry (once
// per launch: every rank reads the config).
void warn_of_alias(const OptionField& field, const nlohmann::json& value, const TrainerOptions& o) {
  if (!first_of_launch()) return;
  const nlohmann::json init_args = {{field.key, value}};
  const bool ddp = std::string(field.home) == "strategy";
  console().warn("config key 'trainer.{}' is an alias that still works; write it in {}: trainer.{}: {}{}", field.key,
                 ddp ? "the strategy's init_args" : "the init_args of the SLURMEnvironment plugin", field.home,
                 (ddp ? strategy_entry(o, init_args) : slurm_plugin(init_args)).dump(),
                 ddp ? "" : " (which also sets cluster_environment to slurm)");
}

const std::vector<OptionField>& option_fields() {
  static const std::vector<OptionField> fields = {
      // First: turning barebones on turns options off, which a later key may turn on again (an error).
      ARC_OPTION_READ(barebones,
                      "measure the Trainer's own overhead: no checkpoints, loggers, log(), progress bar, model "
                      "summary or sanity check",
                      read_barebones,
                      [](const TrainerOptions& o) {
                        const auto conflict = o.barebones() ? barebones_conflict(o) : "";
                        ARC_CHECK(conflict.empty(), "barebones=true and ", conflict,
                                  " contradict each other: barebones mode turns off everything that may cost speed; ",
                                  "drop one of them");
                      }),
      ARC_OPTION(max_epochs, "epochs to train (-1: no limit; unset: 1000, or none when max_steps is set)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(!o.max_epochs() || *o.max_epochs() >= -1,
                             "max_epochs must be >= 0, or -1 for no limit, got ", *o.max_epochs());
                 }),
      ARC_OPTION(min_epochs, "epochs before a stop request (EarlyStopping) may end fit",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(!o.min_epochs() || *o.min_epochs() >= 0, "min_epochs must be >= 0, got ", *o.min_epochs());
                 }),
      ARC_OPTION(max_steps, "optimizer steps to train (-1: no limit)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.max_steps() >= -1, "max_steps must be >= 0, or -1 for no limit, got ", o.max_steps());
                 }),
      ARC_OPTION(min_steps, "optimizer steps before a stop request may end fit",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(!o.min_steps() || *o.min_steps() >= 0, "min_steps must be >= 0, got ", *o.min_steps());
                 }),
      ARC_OPTION_READ(max_time, "seconds of training (or \"DD:HH:MM:SS\", or {days, hours, minutes, seconds})",
                      read_max_time,
                      [](const TrainerOptions& o) {
                        ARC_CHECK(!o.max_time() || *o.max_time() > 0, "max_time must be a positive duration, got ",
                                  *o.max_time(), " s");
                      }),
      ARC_AMOUNT_OPTION(limit_train_batches, "training batches per epoch: a fraction (0.25) or a count (10)"),
      ARC_AMOUNT_OPTION(limit_val_batches, "validation batches per run: a fraction or a count (0 skips validation)"),
      ARC_AMOUNT_OPTION(limit_test_batches, "test batches: a fraction or a count"),
      ARC_AMOUNT_OPTION(limit_predict_batches, "predict batches: a fraction or a count"),
      ARC_AMOUNT_OPTION(overfit_batches, "train and validate on these first batches only, unshuffled (0: off)"),
      ARC_OPTION_READ(val_check_interval,
                      "validate every fraction of an epoch (0.5), every that many batches (100) or every duration "
                      "(\"DD:HH:MM:SS\" or {days, hours, minutes, seconds})",
                      read_val_check_interval,
                      [](const TrainerOptions& o) {
                        check_amount("val_check_interval", o.val_check_interval(), /*duration_allowed=*/true);
                        ARC_CHECK(!o.val_check_interval().is_zero(),
                                  "val_check_interval must be > 0, got 0; use limit_val_batches=0 to skip validation");
                      }),
      ARC_OPTION(reload_dataloaders_every_n_epochs,
                 "get the loaders from the data hooks again every n epochs (0: once)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.reload_dataloaders_every_n_epochs() >= 0,
                             "reload_dataloaders_every_n_epochs must be >= 0 (0: never), got ",
                             o.reload_dataloaders_every_n_epochs());
                 }),
      ARC_OPTION(use_distributed_sampler, "each rank reads its share of the data (false: the source as given)",
                 no_check),
      ARC_OPTION(even_batches,
                 "ranks with different training batch counts: \"error\", \"pad\" (repeat up to the most) or "
                 "\"drop\" (stop at the fewest)",
                 [](const TrainerOptions& o) { check_choice("even_batches", o.even_batches(), kEvenBatches); }),
      ARC_OPTION(check_val_every_n_epoch, "validate every N epochs (null: every val_check_interval batches of the fit)",
                 [](const TrainerOptions& o) {
                   const auto every = o.check_val_every_n_epoch();
                   ARC_CHECK(!every || *every >= 1, "check_val_every_n_epoch must be >= 1 (or null), got ",
                             every.value_or(0));
                   ARC_CHECK(every || !o.val_check_interval().is_fraction, "check_val_every_n_epoch=null validates ",
                             "every val_check_interval batches of the whole fit, which must then be a count; got ",
                             "the fraction ", o.val_check_interval().value, " (set e.g. val_check_interval=100)");
                 }),
      ARC_OPTION(num_sanity_val_steps, "validation batches run before training (-1: all)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.num_sanity_val_steps() >= -1,
                             "num_sanity_val_steps must be >= 0, or -1 for all batches, got ",
                             o.num_sanity_val_steps());
                 }),
      ARC_OPTION(log_every_n_steps,
                 "optimizer steps (batches that end an accumulation window) between step metrics sent to the loggers",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.log_every_n_steps() >= 1, "log_every_n_steps must be >= 1, got ", o.log_every_n_steps());
                 }),
      ARC_OPTION(accumulate_grad_batches, "batches whose gradients add up to one optimizer step",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.accumulate_grad_batches() >= 1, "accumulate_grad_batches must be >= 1, got ",
                             o.accumulate_grad_batches());
                 }),
      ARC_OPTION(gradient_clip_val, "clip gradients to this norm or value (unset: no clipping)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(!o.gradient_clip_val() || *o.gradient_clip_val() >= 0,
                             "gradient_clip_val must be >= 0, got ", *o.gradient_clip_val());
                 }),
      ARC_OPTION(gradient_clip_algorithm, "\"norm\" or \"value\"",
                 [](const TrainerOptions& o) {
                   check_choice("gradient_clip_algorithm", o.gradient_clip_algorithm(), kClipAlgorithms);
                 }),
      ARC_OPTION_READ(deterministic,
                      "deterministic algorithms only (\"warn\": warn where an operation has none, instead of failing)",
                      read_deterministic, no_check),
      ARC_OPTION(detect_anomaly, "a backward that makes NaN fails naming its operation (slow; for debugging)",
                 no_check),
      ARC_OPTION(inference_mode, "evaluate under LibTorch's inference mode (false: no_grad)", no_check),
      ARC_OPTION(benchmark, "cuDNN picks the fastest convolution algorithms (unset: LibTorch's setting)", no_check),
      ARC_OPTION(seed, "seeds LibTorch's generators and the data order (unset: not seeded)", no_check),
      ARC_OPTION_READ(fast_dev_run, "true or n: n batches of every stage once, nothing saved or logged",
                      read_fast_dev_run,
                      [](const TrainerOptions& o) {
                        ARC_CHECK(o.fast_dev_run() >= 0, "fast_dev_run must be true, false or a batch count >= 0, got ",
                                  o.fast_dev_run());
                      }),
      ARC_OPTION(default_root_dir, "folder of logs and checkpoints",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(!o.default_root_dir().empty(),
                             "default_root_dir must not be empty; use \".\" for the working directory");
                 }),
      ARC_OPTION(accelerator, "\"auto\", \"cpu\", \"gpu\" or \"cuda\"", no_check),
      ARC_OPTION(devices, "\"auto\", a count (-1: all), a list of indices, or \"0,1\"", no_check),
      ARC_OPTION(num_nodes, "machines the run spans", no_check),
      ARC_OPTION_READ(precision, "\"32-true\", \"64-true\", \"bf16-mixed\", \"16-mixed\", \"bf16-true\" or \"16-true\"",
                      read_precision, no_check),
      ARC_OPTION(logger,
                 "CSV and TensorBoard logs in lightning_logs/version_N, or a {class_path, init_args} list; false: none",
                 no_check),
      ARC_OPTION(enable_checkpointing, "a ModelCheckpoint (with last.ckpt) unless the callbacks have one", no_check),
      ARC_OPTION(async_checkpointing, "checkpoints of fit are copied, then written by a background thread", no_check),
      ARC_OPTION(enable_progress_bar, "the progress bar", no_check),
      ARC_OPTION(enable_model_summary, "the model summary at fit start", no_check),
      ARC_OPTION_READ(profiler,
                      "\"simple\" or \"advanced\" (\"pytorch\"): time each action, report in "
                      "<log_dir>/<stage>-profile.txt; or Lightning's SimpleProfiler, PyTorchProfiler with dirpath and "
                      "filename",
                      read_profiler,
                      [](const TrainerOptions& o) {
                        const auto& spec = o.profiler();
                        if (!spec.name.empty()) check_choice("profiler", spec.name, profiler_names());
                        ARC_CHECK(!spec.name.empty() || spec.name_only(), "the profiler's dirpath, filename, ",
                                  "row_limit and chrome_trace need a profiler; name one (\"simple\", \"advanced\")");
                        ARC_CHECK(spec.name != "simple" || (!spec.row_limit && spec.chrome_trace),
                                  "profiler \"simple\" lists no operators and writes no trace; row_limit and ",
                                  "chrome_trace are the \"advanced\" profiler's (PyTorchProfiler)");
                      }),
      ARC_OPTION(num_threads, "intra-op threads per process (0: the cores divided among the processes)", no_check),
      ARC_OPTION(tune_malloc, "keep large activation buffers in the heap between steps", no_check),
      ARC_OPTION(cluster_environment, "\"auto\" (detect) or local, slurm, torchelastic, mpi, lsf, kubeflow", no_check),
      ARC_DDP_OPTION(timeout, "seconds the rendezvous, barriers, saves and launchers may wait"),
      ARC_DDP_OPTION(collective_timeout,
                     "seconds a collective of a step may wait for the other ranks (at most timeout)"),
      ARC_DDP_OPTION(find_unused_parameters, "DDP: allow parameters without gradient in a step"),
      ARC_DDP_OPTION(static_graph, "DDP: every step uses the same parameters (learned in the first)"),
      ARC_DDP_OPTION(gradient_as_bucket_view, "DDP: gradients live in the all-reduce buckets (no copy back)"),
      ARC_OPTION(sync_batchnorm, "DDP: arc::SyncBatchNorm layers use the statistics of every rank's batch", no_check),
      ARC_DDP_OPTION(first_bucket_mb,
                     "DDP: size of the first gradient bucket in MiB (bucket_cap_mb where all-reduces cannot overlap "
                     "backward)"),
      ARC_DDP_OPTION(bucket_cap_mb, "DDP: size of the other gradient buckets in MiB"),
      ARC_DDP_OPTION(shared_memory, "DDP: all-reduce through shared memory among the processes of a machine"),
      ARC_DDP_OPTION(process_group_backend, "DDP on GPUs: \"auto\", \"nccl\" or \"gloo\""),
      ARC_DDP_OPTION(sharding_strategy,
                     "fsdp: \"SHARD_GRAD_OP\" (\"auto\"), \"FULL_SHARD\", \"HYBRID_SHARD\", \"SHARD_OPTIMIZER\" or "
                     "\"NO_SHARD\": what each rank keeps"),
      ARC_DDP_OPTION(state_dict_type,
                     "fsdp: \"full\" (one checkpoint file) or \"sharded\" (a folder: each rank writes what it owns)"),
      ARC_DDP_OPTION(forward_prefetch, "fsdp FULL_SHARD: start the next unit's gather as a unit's forward starts"),
      ARC_DDP_OPTION(backward_prefetch,
                     "fsdp FULL_SHARD: \"BACKWARD_PRE\", \"BACKWARD_POST\" or \"NONE\": when the previous unit's "
                     "gather starts in backward"),
      ARC_SLURM_OPTION(auto_requeue, "under SLURM: save and requeue on requeue_signal"),
      ARC_SLURM_OPTION(requeue_signal, "\"SIGUSR1\", \"SIGUSR2\", \"SIGHUP\" or \"SIGALRM\""),
      ARC_OPTION(elastic_checkpoint_every_n_steps, "strategy elastic: global steps between its checkpoints (0: off)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.elastic_checkpoint_every_n_steps() >= 0,
                             "elastic_checkpoint_every_n_steps must be >= 0 (0 = off), got ",
                             o.elastic_checkpoint_every_n_steps());
                 }),
      ARC_OPTION(elastic_checkpoint_every_seconds, "strategy elastic: seconds between its checkpoints (0: off)",
                 [](const TrainerOptions& o) {
                   ARC_CHECK(o.elastic_checkpoint_every_seconds() >= 0,
                             "elastic_checkpoint_every_seconds must be >= 0 (0 = off), got ",
                             o.elastic_checkpoint_every_seconds());
                 }),
      // Late: a strategy class stands for options above (strategy_class_options), where their own
      // keys leave them unset or "auto".
      OptionField{"strategy",
                  "\"auto\", \"single_device\", \"ddp\", \"ddp_spawn\", \"elastic\" or \"fsdp\" (Lightning's "
                  "\"ddp_find_unused_parameters_true\" is \"ddp\" with find_unused_parameters), or Lightning's "
                  "DDPStrategy, FSDPStrategy or SingleDeviceStrategy with their init_args; {class_path: <a "
                  "strategy's name>, init_args: {...}} sets that strategy's DDP settings",
                  read_strategy, write_strategy, no_check},
      // Last: a plugin stands for options above, which it must not contradict. Its effect is in them,
      // so it writes null, but for SLURM's settings (write_plugins).
      OptionField{"plugins",
                  "Lightning's plugins as the options they stand for: cluster environments (SLURMEnvironment, ...), "
                  "precision plugins, AsyncCheckpointIO, TorchSyncBatchNorm",
                  read_plugins, write_plugins, no_check},
  };
  return fields;
}

#undef ARC_AMOUNT_OPTION
#undef ARC_SLURM_OPTION
#undef ARC_DDP_OPTION
#undef ARC_GROUP_OPTION
#undef ARC_OPTION_READ
#undef ARC_OPTION

}  // namespace

Determinism::Determinism(const char* text) : on(true), warn_only(true) {
  ARC_CHECK(text != nullptr && std::string(text) == "warn", "deterministic must be true, false or \"warn\", got \"",
            text == nullptr ? "" : text, "\"");
}

int64_t BatchAmount::of(int64_t available) const {
  if (!is_fraction) return std::min<int64_t>(available, static_cast<int64_t>(value));
  if (value == 1.0) return available;
  return static_cast<int64_t>(std::floor(available * value));
}

TrainerOptions& TrainerOptions::barebones(bool on) {
  barebones_ = on;
  if (on) enable_checkpointing(false).logger(false).enable_progress_bar(false).enable_model_summary(false);
  return on ? num_sanity_val_steps(0) : *this;
}

FabricOptions TrainerOptions::fabric_options() const {
  return FabricOptions()
      .accelerator(accelerator_)
      .strategy(strategy_)
      .devices(devices_)
      .num_nodes(num_nodes_)
      .precision(precision_)
      .seed(seed_)
      .num_threads(num_threads_)
      .cluster_environment(cluster_environment_)
      .slurm(slurm_)
      .ddp(ddp_)
      .sync_batchnorm(sync_batchnorm_);
}

const std::vector<std::string>& TrainerOptions::plugin_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, environment] : kEnvironmentPlugins) out.push_back(name);
    out.insert(out.end(), kOtherPlugins.begin(), kOtherPlugins.end());
    return out;
  }();
  return names;
}

void TrainerOptions::apply_plugin(const std::string& name, const Config& init_args) {
  arc::apply_plugin(Config(nlohmann::json::object(), "trainer"), name, init_args, *this);
}

TrainerOptions TrainerOptions::from_json(const nlohmann::json& json) {
  Config config(json, "trainer");
  TrainerOptions o;
  std::vector<std::pair<const OptionField*, nlohmann::json>> aliases;
  for (const auto& field : option_fields()) {
    field.read(config, o);
    if (const auto* given = config.find(field.key); field.home != nullptr && given != nullptr && !given->is_null())
      aliases.emplace_back(&field, *given);
  }
  config.finish();
  o.validate();
  for (const auto& [field, value] : aliases) warn_of_alias(*field, value, o);
  return o;
}

nlohmann::json TrainerOptions::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& field : option_fields())
    if (written_by_key(field, *this)) out[field.key] = field.write(*this);
  return out;
}

std::vector<OptionHelp> TrainerOptions::help() {
  const TrainerOptions defaults;
  std::vector<OptionHelp> out;
  for (const auto& field : option_fields()) out.push_back({field.key, field.write(defaults), field.help});
  return out;
}

void TrainerOptions::validate() const {
  for (const auto& field : option_fields()) field.check(*this);
  // The launch settings (their rows above check nothing) are FabricOptions', checked there once for
  // the Trainer and arc::Fabric alike.
  fabric_options().validate();
}

}  // namespace arc
