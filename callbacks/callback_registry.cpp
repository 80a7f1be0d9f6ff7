// The shipped callbacks by Lightning's class names, built from init_args.
#include <arc/callbacks/callback_registry.h>

#include <arc/base/console.h>

#include <arc/callbacks/batch_size_finder.h>
#include <arc/callbacks/device_stats_monitor.h>
#include <arc/callbacks/early_stopping.h>
#include <arc/callbacks/elastic_checkpoint.h>
#include <arc/callbacks/finetuning.h>
#include <arc/callbacks/gradient_accumulation_scheduler.h>
#include <arc/callbacks/learning_rate_finder.h>
#include <arc/callbacks/learning_rate_monitor.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_pruning.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/on_exception_checkpoint.h>
#include <arc/callbacks/prediction_writer.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/callbacks/spike_detection.h>
#include <arc/callbacks/throughput_monitor.h>
#include <arc/callbacks/timer.h>
#include <arc/callbacks/weight_averaging.h>

#include <algorithm>
#include <limits>

namespace arc {
namespace {

// Reads init_args key `name` into the ARC_ARG of the same name.
#define ARC_READ(name) config.read(#name, options.name())

std::shared_ptr<Callback> model_checkpoint(const Config& config) {
  ModelCheckpointOptions options;
  ARC_READ(dirpath);
  ARC_READ(filename);
  ARC_READ(monitor);
  ARC_READ(mode);
  ARC_READ(save_top_k);
  ARC_READ(save_last);
  ARC_READ(every_n_train_steps);
  ARC_READ(every_n_epochs);
  ARC_READ(train_time_interval);
  ARC_READ(save_weights_only);
  ARC_READ(auto_insert_metric_name);
  ARC_READ(async_checkpointing);
  ARC_READ(verbose);
  ARC_READ(save_on_train_epoch_end);
  ARC_READ(enable_version_counter);
  ARC_READ(save_on_exception);
  return std::make_shared<ModelCheckpoint>(options);
}

std::shared_ptr<Callback> early_stopping(const Config& config) {
  EarlyStoppingOptions options(config.require<std::string>("monitor"));
  ARC_READ(min_delta);
  ARC_READ(patience);
  ARC_READ(mode);
  ARC_READ(check_finite);
  ARC_READ(stopping_threshold);
  ARC_READ(divergence_threshold);
  ARC_READ(verbose);
  ARC_READ(strict);
  ARC_READ(check_on_train_epoch_end);
  ARC_READ(log_rank_zero_only);
  return std::make_shared<EarlyStopping>(options);
}

// lambda_func: a number (the factor at every epoch), or Lightning's multiplicative (2) as
// LightningCLI prints it; other functions are for C++.
std::shared_ptr<Callback> backbone_finetuning(const Config& config) {
  BackboneFinetuningOptions options;
  ARC_READ(unfreeze_backbone_at_epoch);
  ARC_READ(backbone_initial_ratio_lr);
  ARC_READ(backbone_initial_lr);
  ARC_READ(should_align);
  ARC_READ(initial_denom_lr);
  ARC_READ(train_bn);
  ARC_READ(verbose);
  ARC_READ(rounding);
  ARC_READ(backbone);
  if (const auto* lambda = config.find("lambda_func"); lambda != nullptr && !lambda->is_null()) {
    const auto text = lambda->is_string() ? lambda->get<std::string>() : "";
    const std::string suffix = ".multiplicative";
    const bool multiplicative =
        text == "multiplicative" ||
        (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0);
    ARC_CHECK(lambda->is_number() || multiplicative, "config key '", config.qualified("lambda_func"),
              "' must be a number (the backbone's rate is multiplied by it each epoch) or Lightning's ",
              "multiplicative, got ", lambda->dump(), "; other functions are given in C++ ",
              "(BackboneFinetuningOptions::lambda_func)");
    const double factor = multiplicative ? 2.0 : lambda->get<double>();
    options.lambda_func([factor](int64_t) { return factor; });
  }
  return std::make_shared<BackboneFinetuning>(options);
}

// Lightning's init_args (mode in any case, as its __init__ lowercases it).
std::shared_ptr<Callback> batch_size_finder(const Config& config) {
  BatchSizeOptions options;
  ARC_READ(mode);
  ARC_READ(steps_per_trial);
  ARC_READ(init_val);
  ARC_READ(max_trials);
  ARC_READ(margin);
  ARC_READ(max_val);
  return std::make_shared<BatchSizeFinder>(options, config.get<std::string>("batch_arg_name", "batch_size"));
}

// Lightning's init_args; atol and rtol null: no such bound; exclude_batches_path null: the
// default_root_dir.
std::shared_ptr<Callback> spike_detection(const Config& config) {
  SpikeDetectionOptions options;
  ARC_READ(mode);
  ARC_READ(window);
  ARC_READ(warmup);
  ARC_READ(atol);
  ARC_READ(rtol);
  options.exclude_batches_path(config.get_optional<std::string>("exclude_batches_path").value_or(""));
  ARC_READ(finite_only);
  return std::make_shared<SpikeDetection>(options);
}

#undef ARC_READ

// A device as torch names it ("cpu", "cuda", "cuda:1"), or nullopt when absent or null.
std::optional<torch::Device> device_named(const Config& config, const std::string& key) {
  const auto name = config.get_optional<std::string>(key);
  if (!name) return std::nullopt;
  try {
    return torch::Device(*name);
  } catch (const c10::Error&) {
    ARC_FAIL("config key '", config.qualified(key), "' is \"", *name,
             "\", which is not a device; give one as torch names them: \"cpu\", \"cuda\" or \"cuda:1\"");
  }
}

// swa_lrs: one number, or a list of one per parameter group; device: where the average is kept
// (Lightning's default, the CPU; null: beside the module's weights). avg_fn is a Python function.
std::shared_ptr<Callback> stochastic_weight_averaging(const Config& config) {
  const auto* rates = config.find("swa_lrs");
  const auto swa_lrs = rates != nullptr && rates->is_number() ? std::vector<double>{config.require<double>("swa_lrs")}
                                                              : config.require<std::vector<double>>("swa_lrs");
  const auto* avg_fn = config.find("avg_fn");
  ARC_CHECK(avg_fn == nullptr || avg_fn->is_null(), "config key '", config.qualified("avg_fn"), "' is ", avg_fn->dump(),
            "; a config cannot hold a function: leave it null for the ",
            "equal-weight mean, or subclass StochasticWeightAveraging in C++ and override average()");
  const std::optional<torch::Device> device =
      config.find("device") != nullptr ? device_named(config, "device") : torch::Device(torch::kCPU);
  return std::make_shared<StochasticWeightAveraging>(swa_lrs, config.get<double>("swa_epoch_start", 0.8),
                                                     config.get<int64_t>("annealing_epochs", 10),
                                                     config.get<std::string>("annealing_strategy", "cos"), device);
}

// Lightning's progress bars, drawn by ProgressBar with their defaults (every batch; one line for
// the fit). What only tqdm or Rich can do is refused, or said to be left out.
std::shared_ptr<Callback> lightning_progress_bar(const Config& config) {
  return std::make_shared<ProgressBar>(config.get<int64_t>("refresh_rate", 1), config.get<bool>("leave", false));
}

std::shared_ptr<Callback> tqdm_progress_bar(const Config& config) {
  const auto position = config.get<int64_t>("process_position", 0);
  ARC_CHECK(position == 0, "config key '", config.qualified("process_position"), "' is ", position,
            "; it moves tqdm's bars down by that many lines, for programs that draw bars of their own, and ",
            "Arclight draws one line: leave it 0");
  return lightning_progress_bar(config);
}

std::shared_ptr<Callback> rich_progress_bar(const Config& config) {
  const auto* theme = config.find("theme");
  if (theme != nullptr && !theme->is_null())
    console().warn(
        "config key '{}' is not used: Rich's colours have no counterpart in Arclight's progress bar, "
        "which draws plain text",
        config.qualified("theme"));
  const auto* console_kwargs = config.find("console_kwargs");
  ARC_CHECK(console_kwargs == nullptr || console_kwargs->is_null() || console_kwargs->empty(), "config key '",
            config.qualified("console_kwargs"), "' is ", console_kwargs->dump(),
            "; it configures Rich's console, which Arclight does not use (its bar writes plain text to standard ",
            "error): leave it out");
  return lightning_progress_bar(config);
}

// {"epoch": factor} with the epochs as JSON keys, as Lightning's scheduling dict.
std::shared_ptr<Callback> gradient_accumulation_scheduler(const Config& config) {
  const auto* found = config.find("scheduling");
  const auto table = found != nullptr ? *found : nlohmann::json();
  ARC_CHECK(table.is_object(), "config key '", config.qualified("scheduling"),
            "' must map epochs to factors, e.g. {\"0\": 4, \"5\": 2}, got ", table.dump());
  std::map<int64_t, int64_t> scheduling;
  for (const auto& [epoch, factor] : table.items()) {
    char* end = nullptr;
    const long long number = std::strtoll(epoch.c_str(), &end, 10);
    ARC_CHECK(!epoch.empty() && *end == '\0' && factor.is_number_integer(), "config key '",
              config.qualified("scheduling"), "' maps epochs (integers) to factors (integers), got \"", epoch,
              "\": ", factor.dump());
    scheduling[number] = factor.get<int64_t>();
  }
  return std::make_shared<GradientAccumulationScheduler>(scheduling);
}

// Lightning's init_args. early_stop_threshold null: never stop early; weights_only is about
// unpickling code in torch.load, which Arclight's checkpoints never hold, so any value reads.
std::shared_ptr<Callback> learning_rate_finder(const Config& config) {
  LRFinderOptions options;
  config.read("min_lr", options.min_lr());
  config.read("max_lr", options.max_lr());
  config.read("num_training_steps", options.num_training());
  config.read("mode", options.mode());
  if (const auto* threshold = config.find("early_stop_threshold"); threshold != nullptr && threshold->is_null())
    options.early_stop_threshold(0);
  else
    config.read("early_stop_threshold", options.early_stop_threshold());
  config.get_optional<bool>("weights_only");
  return std::make_shared<LearningRateFinder>(options, config.get<bool>("update_attr", true),
                                              config.get<std::string>("attr_name", ""));
}

// Lightning's init_args: amount an int (a count) or a float (a fraction), apply_pruning and
// use_lottery_ticket_hypothesis booleans (functions of the epoch are C++ only), parameters_to_prune
// [submodule, parameter] pairs.
std::shared_ptr<Callback> model_pruning(const Config& config) {
  ModelPruningOptions options;
  config.read("pruning_fn", options.pruning_fn());
  if (const auto* pairs = config.find("parameters_to_prune"); pairs != nullptr && !pairs->is_null()) {
    ARC_CHECK(pairs->is_array(), "config key '", config.qualified("parameters_to_prune"),
              "' must be a list of [submodule, parameter] pairs, e.g. [[fc1, weight]], got ", pairs->dump());
    for (const auto& pair : *pairs) {
      ARC_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string(), "config key '",
                config.qualified("parameters_to_prune"), "' must hold [submodule, parameter] pairs of names, got ",
                pair.dump());
      options.parameters_to_prune().emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
    }
  }
  if (const auto* names = config.find("parameter_names"); names != nullptr && !names->is_null()) {
    ARC_CHECK(
        names->is_array() && std::all_of(names->begin(), names->end(), [](const auto& n) { return n.is_string(); }),
        "config key '", config.qualified("parameter_names"), "' must be a list of names, e.g. [weight], got ",
        names->dump());
    options.parameter_names(names->get<std::vector<std::string>>());
  }
  config.read("use_global_unstructured", options.use_global_unstructured());
  if (const auto* amount = config.find("amount"); amount != nullptr && !amount->is_null()) {
    ARC_CHECK(amount->is_number(), "config key '", config.qualified("amount"),
              "' must be a fraction (0.5) or a count (100), got ", amount->dump());
    const auto value = amount->is_number_integer() ? PruningAmount::count(amount->get<int64_t>())
                                                   : PruningAmount::fraction(amount->get<double>());
    options.amount([value](int64_t) { return value; });
  }
  const bool apply = config.get<bool>("apply_pruning", true);
  options.apply_pruning([apply](int64_t) { return apply; });
  const bool lottery = config.get<bool>("use_lottery_ticket_hypothesis", true);
  options.use_lottery_ticket_hypothesis([lottery](int64_t) { return lottery; });
  config.read("make_pruning_permanent", options.make_pruning_permanent());
  config.read("resample_parameters", options.resample_parameters());
  config.read("pruning_dim", options.pruning_dim());
  config.read("pruning_norm", options.pruning_norm());
  config.read("verbose", options.verbose());
  config.read("prune_on_train_epoch_end", options.prune_on_train_epoch_end());
  return std::make_shared<ModelPruning>(options);
}

Registry<Callback, const Config&> shipped_callbacks() {
  Registry<Callback, const Config&> r("callback");
  r.add("ModelCheckpoint", model_checkpoint);
  r.add("EarlyStopping", early_stopping);
  r.add("GradientAccumulationScheduler", gradient_accumulation_scheduler);
  r.add("BackboneFinetuning", backbone_finetuning);
  r.add("BatchSizeFinder", batch_size_finder);
  r.add("SpikeDetection", spike_detection);
  r.add("LearningRateFinder", learning_rate_finder);
  r.add("LearningRateMonitor", [](const Config& config) {
    return std::make_shared<LearningRateMonitor>(config.get_optional<std::string>("logging_interval"),
                                                 config.get<bool>("log_momentum", false),
                                                 config.get<bool>("log_weight_decay", false));
  });
  // Lightning's duration forms; unset, it only measures. Its verbose has no counterpart: the
  // Trainer says why fit stopped.
  r.add("Timer", [](const Config& config) {
    config.get<bool>("verbose", true);
    return std::make_shared<Timer>(config.duration("duration").value_or(std::numeric_limits<double>::infinity()),
                                   config.get<std::string>("interval", "step"));
  });
  r.add("DeviceStatsMonitor", [](const Config& config) {
    return std::make_shared<DeviceStatsMonitor>(config.get_optional<bool>("cpu_stats"));
  });
  r.add("ThroughputMonitor", [](const Config& config) {
    return std::make_shared<ThroughputMonitor>(config.get<int64_t>("every_n_steps", 50),
                                               config.get<double>("flops_per_sample", 0),
                                               config.get<double>("available_flops", 0));
  });
  r.add("ProgressBar", [](const Config& config) {
    return std::make_shared<ProgressBar>(config.get_optional<int64_t>("refresh_rate"), config.get<bool>("leave", true));
  });
  r.add("TQDMProgressBar", tqdm_progress_bar);
  r.add("RichProgressBar", rich_progress_bar);
  const auto model_summary = [](const Config& config) {
    return std::make_shared<ModelSummary>(config.get<int64_t>("max_depth", 1));
  };
  r.add("ModelPruning", model_pruning);
  r.add("ModelSummary", model_summary);
  r.add("RichModelSummary", model_summary);
  // Lightning's device: unset or null, beside the module's weights.
  r.add("WeightAveraging", [](const Config& config) {
    return std::make_shared<WeightAveraging>(config.get<bool>("use_buffers", true), device_named(config, "device"));
  });
  r.add("EMAWeightAveraging", [](const Config& config) {
    return std::make_shared<EMAWeightAveraging>(config.get<double>("decay", 0.999),
                                                config.get<int64_t>("update_every_n_steps", 1),
                                                config.get_optional<int64_t>("update_starting_at_step"),
                                                config.get_optional<int64_t>("update_starting_at_epoch"),
                                                config.get<bool>("use_buffers", true), device_named(config, "device"));
  });
  r.add("StochasticWeightAveraging", stochastic_weight_averaging);
  r.add("OnExceptionCheckpoint", [](const Config& config) {
    return std::make_shared<OnExceptionCheckpoint>(config.require<std::string>("dirpath"),
                                                   config.get<std::string>("filename", "on_exception"));
  });
  r.add("PredictionWriter", [](const Config& config) {
    return std::make_shared<PredictionWriter>(config.require<std::string>("output_dir"),
                                              write_interval_named(config.get<std::string>("write_interval", "batch")));
  });
  r.add("ElasticCheckpoint", [](const Config& config) {
    return std::make_shared<ElasticCheckpoint>(config.get<int64_t>("every_n_steps", 50),
                                               config.get<double>("every_seconds", 0.0));
  });
  return r;
}

}  // namespace

Registry<Callback, const Config&>& callback_registry() {
  static Registry<Callback, const Config&> registry = shipped_callbacks();
  return registry;
}

std::vector<std::shared_ptr<Callback>> callbacks_from_json(const nlohmann::json& list, const std::string& path,
                                                           nlohmann::json* resolved) {
  return detail::from_class_paths(callback_registry(), list, path, resolved);
}

}  // namespace arc
