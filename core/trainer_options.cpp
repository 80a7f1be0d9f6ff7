// TrainerOptions from and to JSON, and the checks on impossible values.
#include <arc/core/trainer_options.h>

#include <arc/core/config.h>
#include <arc/core/error.h>
#include <arc/core/host.h>
#include <arc/core/precision.h>

#include <cmath>
#include <csignal>

namespace arc {
namespace {

const std::vector<std::string> kAccelerators = {"auto", "cpu", "gpu", "cuda"};
const std::vector<std::string> kClipAlgorithms = {"norm", "value"};
const std::vector<std::string> kProcessGroupBackends = {"auto", "nccl", "gloo"};
const std::vector<std::pair<std::string, int>> kRequeueSignals = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP}, {"SIGALRM", SIGALRM}};
const std::vector<std::string> kClusterEnvironments = {"auto", "local", "slurm",   "torchelastic",
                                                       "mpi",  "lsf",   "kubeflow"};

std::vector<std::string> requeue_signal_names() {
  std::vector<std::string> names;
  for (const auto& [name, number] : kRequeueSignals) names.push_back(name);
  return names;
}

BatchAmount read_amount(const Config& config, const std::string& key, BatchAmount fallback) {
  const auto* value = config.find(key);
  if (value == nullptr) return fallback;
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
  if (amount.is_fraction) return amount.value;
  return static_cast<int64_t>(amount.value);
}

// Lightning accepts seconds, "DD:HH:MM:SS" and {"days": .., "hours": .., ...}.
std::optional<double> read_max_time(const Config& config) {
  const auto* value = config.find("max_time");
  if (value == nullptr || value->is_null()) return std::nullopt;
  const std::string hint =
      "' must be seconds, \"DD:HH:MM:SS\" or {\"days\", \"hours\", \"minutes\", \"seconds\"}, got ";
  if (value->is_number()) return value->get<double>();
  if (value->is_string()) {
    int days = 0, hours = 0, minutes = 0, seconds = 0;
    char tail = 0;
    const int read =
        std::sscanf(value->get<std::string>().c_str(), "%d:%d:%d:%d%c", &days, &hours, &minutes, &seconds, &tail);
    ARC_CHECK(read == 4, "config key '", config.qualified("max_time"), hint, value->dump());
    return ((days * 24.0 + hours) * 60.0 + minutes) * 60.0 + seconds;
  }
  ARC_CHECK(value->is_object(), "config key '", config.qualified("max_time"), hint, value->dump());
  Config parts(*value, config.qualified("max_time"));
  const double total = parts.get<double>("days", 0) * 86400 + parts.get<double>("hours", 0) * 3600 +
                       parts.get<double>("minutes", 0) * 60 + parts.get<double>("seconds", 0);
  parts.finish();
  return total;
}

int64_t read_fast_dev_run(const Config& config) {
  const auto* value = config.find("fast_dev_run");
  if (value == nullptr) return 0;
  if (value->is_boolean()) return value->get<bool>() ? 1 : 0;
  ARC_CHECK(value->is_number_integer(), "config key '", config.qualified("fast_dev_run"),
            "' must be true, false or a batch count, got ", value->dump());
  return value->get<int64_t>();
}

std::string read_precision(const Config& config) {
  const auto* value = config.find("precision");
  if (value == nullptr) return "32-true";
  if (value->is_number_integer()) return std::to_string(value->get<int64_t>());
  ARC_CHECK(value->is_string(), "config key '", config.qualified("precision"),
            "' must be a string such as \"32-true\", got ", value->dump());
  return value->get<std::string>();
}

void check_choice(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& choice : allowed)
    if (choice == value) return;
  throw Error(unknown_name_message(key, value, allowed));
}

void check_amount(const char* key, const BatchAmount& amount) {
  ARC_CHECK(amount.value >= 0 && (!amount.is_fraction || amount.value <= 1.0), key,
            " must be a fraction in [0.0, 1.0] or a batch count >= 0, got ", amount.value);
}

}  // namespace

int64_t BatchAmount::of(int64_t available) const {
  if (!is_fraction) return std::min<int64_t>(available, static_cast<int64_t>(value));
  if (value == 1.0) return available;
  return static_cast<int64_t>(std::floor(available * value));
}

int TrainerOptions::requeue_signal_number() const {
  for (const auto& [name, number] : kRequeueSignals)
    if (name == requeue_signal_) return number;
  return 0;
}

int64_t TrainerOptions::threads_per_process(int64_t local_processes) const {
  if (num_threads_ > 0) return num_threads_;
  return std::max<int64_t>(1, usable_cores() / std::max<int64_t>(1, local_processes));
}

TrainerOptions TrainerOptions::from_json(const nlohmann::json& json) {
  Config config(json, "trainer");
  TrainerOptions o;
  o.max_epochs_ = config.get_optional<int64_t>("max_epochs");
  o.min_epochs_ = config.get_optional<int64_t>("min_epochs");
  o.max_steps_ = config.get<int64_t>("max_steps", o.max_steps_);
  o.min_steps_ = config.get_optional<int64_t>("min_steps");
  o.max_time_ = read_max_time(config);
  o.limit_train_batches_ = read_amount(config, "limit_train_batches", o.limit_train_batches_);
  o.limit_val_batches_ = read_amount(config, "limit_val_batches", o.limit_val_batches_);
  o.limit_test_batches_ = read_amount(config, "limit_test_batches", o.limit_test_batches_);
  o.limit_predict_batches_ = read_amount(config, "limit_predict_batches", o.limit_predict_batches_);
  o.overfit_batches_ = read_amount(config, "overfit_batches", o.overfit_batches_);
  o.val_check_interval_ = read_amount(config, "val_check_interval", o.val_check_interval_);
  o.check_val_every_n_epoch_ = config.get<int64_t>("check_val_every_n_epoch", o.check_val_every_n_epoch_);
  o.num_sanity_val_steps_ = config.get<int64_t>("num_sanity_val_steps", o.num_sanity_val_steps_);
  o.log_every_n_steps_ = config.get<int64_t>("log_every_n_steps", o.log_every_n_steps_);
  o.accumulate_grad_batches_ = config.get<int64_t>("accumulate_grad_batches", o.accumulate_grad_batches_);
  o.gradient_clip_val_ = config.get_optional<double>("gradient_clip_val");
  o.gradient_clip_algorithm_ = config.get<std::string>("gradient_clip_algorithm", o.gradient_clip_algorithm_);
  o.deterministic_ = config.get<bool>("deterministic", o.deterministic_);
  o.benchmark_ = config.get_optional<bool>("benchmark");
  o.seed_ = config.get_optional<uint64_t>("seed");
  o.fast_dev_run_ = read_fast_dev_run(config);
  o.default_root_dir_ = config.get<std::string>("default_root_dir", o.default_root_dir_);
  o.accelerator_ = config.get<std::string>("accelerator", o.accelerator_);
  o.strategy_ = config.get<std::string>("strategy", o.strategy_);
  if (const auto* devices = config.find("devices"))
    o.devices_ = Devices::from_json(*devices, config.qualified("devices"));
  o.num_nodes_ = config.get<int64_t>("num_nodes", o.num_nodes_);
  o.precision_ = read_precision(config);
  o.enable_checkpointing_ = config.get<bool>("enable_checkpointing", o.enable_checkpointing_);
  o.enable_progress_bar_ = config.get<bool>("enable_progress_bar", o.enable_progress_bar_);
  o.enable_model_summary_ = config.get<bool>("enable_model_summary", o.enable_model_summary_);
  o.num_threads_ = config.get<int64_t>("num_threads", o.num_threads_);
  o.tune_malloc_ = config.get<bool>("tune_malloc", o.tune_malloc_);
  o.cluster_environment_ = config.get<std::string>("cluster_environment", o.cluster_environment_);
  o.timeout_ = config.get<double>("timeout", o.timeout_);
  o.find_unused_parameters_ = config.get<bool>("find_unused_parameters", o.find_unused_parameters_);
  o.first_bucket_mb_ = config.get<double>("first_bucket_mb", o.first_bucket_mb_);
  o.bucket_cap_mb_ = config.get<double>("bucket_cap_mb", o.bucket_cap_mb_);
  o.shared_memory_ = config.get<bool>("shared_memory", o.shared_memory_);
  o.process_group_backend_ = config.get<std::string>("process_group_backend", o.process_group_backend_);
  o.auto_requeue_ = config.get<bool>("auto_requeue", o.auto_requeue_);
  o.requeue_signal_ = config.get<std::string>("requeue_signal", o.requeue_signal_);
  o.elastic_checkpoint_every_n_steps_ =
      config.get<int64_t>("elastic_checkpoint_every_n_steps", o.elastic_checkpoint_every_n_steps_);
  o.elastic_checkpoint_every_seconds_ =
      config.get<double>("elastic_checkpoint_every_seconds", o.elastic_checkpoint_every_seconds_);
  config.finish();
  o.validate();
  return o;
}

nlohmann::json TrainerOptions::to_json() const {
  const auto optional = [](const auto& value) -> nlohmann::json {
    if (!value) return nullptr;
    return *value;
  };
  return {{"max_epochs", optional(max_epochs_)},
          {"min_epochs", optional(min_epochs_)},
          {"max_steps", max_steps_},
          {"min_steps", optional(min_steps_)},
          {"max_time", optional(max_time_)},
          {"limit_train_batches", amount_json(limit_train_batches_)},
          {"limit_val_batches", amount_json(limit_val_batches_)},
          {"limit_test_batches", amount_json(limit_test_batches_)},
          {"limit_predict_batches", amount_json(limit_predict_batches_)},
          {"overfit_batches", amount_json(overfit_batches_)},
          {"val_check_interval", amount_json(val_check_interval_)},
          {"check_val_every_n_epoch", check_val_every_n_epoch_},
          {"num_sanity_val_steps", num_sanity_val_steps_},
          {"log_every_n_steps", log_every_n_steps_},
          {"accumulate_grad_batches", accumulate_grad_batches_},
          {"gradient_clip_val", optional(gradient_clip_val_)},
          {"gradient_clip_algorithm", gradient_clip_algorithm_},
          {"deterministic", deterministic_},
          {"benchmark", optional(benchmark_)},
          {"seed", optional(seed_)},
          {"fast_dev_run", fast_dev_run_},
          {"default_root_dir", default_root_dir_},
          {"accelerator", accelerator_},
          {"strategy", strategy_},
          {"devices", devices_.to_json()},
          {"num_nodes", num_nodes_},
          {"precision", precision_},
          {"enable_checkpointing", enable_checkpointing_},
          {"enable_progress_bar", enable_progress_bar_},
          {"enable_model_summary", enable_model_summary_},
          {"num_threads", num_threads_},
          {"tune_malloc", tune_malloc_},
          {"cluster_environment", cluster_environment_},
          {"timeout", timeout_},
          {"find_unused_parameters", find_unused_parameters_},
          {"first_bucket_mb", first_bucket_mb_},
          {"bucket_cap_mb", bucket_cap_mb_},
          {"shared_memory", shared_memory_},
          {"process_group_backend", process_group_backend_},
          {"auto_requeue", auto_requeue_},
          {"requeue_signal", requeue_signal_},
          {"elastic_checkpoint_every_n_steps", elastic_checkpoint_every_n_steps_},
          {"elastic_checkpoint_every_seconds", elastic_checkpoint_every_seconds_}};
}

void TrainerOptions::validate() const {
  ARC_CHECK(!max_epochs_ || *max_epochs_ >= -1, "max_epochs must be >= 0, or -1 for no limit, got ", *max_epochs_);
  ARC_CHECK(!min_epochs_ || *min_epochs_ >= 0, "min_epochs must be >= 0, got ", *min_epochs_);
  ARC_CHECK(max_steps_ >= -1, "max_steps must be >= 0, or -1 for no limit, got ", max_steps_);
  ARC_CHECK(!min_steps_ || *min_steps_ >= 0, "min_steps must be >= 0, got ", *min_steps_);
  ARC_CHECK(!max_time_ || *max_time_ > 0, "max_time must be a positive duration, got ", *max_time_, " s");
  check_amount("limit_train_batches", limit_train_batches_);
  check_amount("limit_val_batches", limit_val_batches_);
  check_amount("limit_test_batches", limit_test_batches_);
  check_amount("limit_predict_batches", limit_predict_batches_);
  check_amount("overfit_batches", overfit_batches_);
  check_amount("val_check_interval", val_check_interval_);
  ARC_CHECK(!val_check_interval_.is_zero(),
            "val_check_interval must be > 0, got 0; use limit_val_batches=0 to skip validation");
  ARC_CHECK(check_val_every_n_epoch_ >= 1, "check_val_every_n_epoch must be >= 1, got ", check_val_every_n_epoch_);
  ARC_CHECK(num_sanity_val_steps_ >= -1, "num_sanity_val_steps must be >= 0, or -1 for all batches, got ",
            num_sanity_val_steps_);
  ARC_CHECK(log_every_n_steps_ >= 1, "log_every_n_steps must be >= 1, got ", log_every_n_steps_);
  ARC_CHECK(accumulate_grad_batches_ >= 1, "accumulate_grad_batches must be >= 1, got ", accumulate_grad_batches_);
  ARC_CHECK(!gradient_clip_val_ || *gradient_clip_val_ >= 0, "gradient_clip_val must be >= 0, got ",
            *gradient_clip_val_);
  check_choice("gradient_clip_algorithm", gradient_clip_algorithm_, kClipAlgorithms);
  ARC_CHECK(fast_dev_run_ >= 0, "fast_dev_run must be true, false or a batch count >= 0, got ", fast_dev_run_);
  ARC_CHECK(!default_root_dir_.empty(), "default_root_dir must not be empty; use \".\" for the working directory");
  check_choice("accelerator", accelerator_, kAccelerators);
  ARC_CHECK(devices_.is_auto || devices_.count >= 1 || devices_.count == -1,
            "devices must be \"auto\", -1 (all) or >= 1, got ", devices_.count);
  ARC_CHECK(num_nodes_ >= 1, "num_nodes must be >= 1, got ", num_nodes_);
  check_choice("precision", precision_, Precision::names());
  ARC_CHECK(num_threads_ >= 0, "num_threads must be >= 0 (0 = all cores), got ", num_threads_);
  check_choice("cluster_environment", cluster_environment_, kClusterEnvironments);
  ARC_CHECK(timeout_ > 0, "timeout must be > 0 seconds, got ", timeout_);
  ARC_CHECK(first_bucket_mb_ > 0 && bucket_cap_mb_ > 0, "first_bucket_mb and bucket_cap_mb must be > 0, got ",
            first_bucket_mb_, " and ", bucket_cap_mb_);
  check_choice("process_group_backend", process_group_backend_, kProcessGroupBackends);
  check_choice("requeue_signal", requeue_signal_, requeue_signal_names());
  ARC_CHECK(elastic_checkpoint_every_n_steps_ >= 0, "elastic_checkpoint_every_n_steps must be >= 0 (0 = off), got ",
            elastic_checkpoint_every_n_steps_);
  ARC_CHECK(elastic_checkpoint_every_seconds_ >= 0, "elastic_checkpoint_every_seconds must be >= 0 (0 = off), got ",
            elastic_checkpoint_every_seconds_);
}

}  // namespace arc
