// Lightning's strategy classes as trainer options.
#include <arc/strategies/detail/lightning_strategy.h>

#include <arc/base/class_path.h>
#include <arc/base/config.h>
#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

namespace arc {
namespace {

const std::vector<std::string> kSupported = {"DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy"};
// Lightning's other strategies, which name no Arclight counterpart.
const std::vector<std::string> kUnsupported = {"DeepSpeedStrategy", "XLAStrategy", "SingleDeviceXLAStrategy",
                                               "ModelParallelStrategy"};
const std::vector<std::string> kStartMethods = {"popen", "spawn", "fork", "forkserver"};
// Arclight's own strategies, which a config may name as a class_path too, with the DDP settings as
// its init_args ({class_path: ddp_spawn, init_args: {timeout: 60}}), as --print_config writes them.
const std::vector<std::string> kOwnStrategies = {"auto", "single_device", "ddp", "ddp_spawn", "elastic", "fsdp"};

// DDPStrategy's init_args that take objects or callables, and what stands for each here.
const std::vector<std::pair<std::string, std::string>> kObjectArgs = {
    {"accelerator", "set trainer.accelerator"},
    {"parallel_devices", "set trainer.devices"},
    {"cluster_environment", "set trainer.cluster_environment or name it in trainer.plugins"},
    {"checkpoint_io", "name it in trainer.plugins (AsyncCheckpointIO: trainer.async_checkpointing)"},
    {"precision_plugin", "set trainer.precision"},
    {"ddp_comm_state", "Arclight's DDP has no communication hooks"},
    {"ddp_comm_hook", "Arclight's DDP has no communication hooks"},
    {"ddp_comm_wrapper", "Arclight's DDP has no communication hooks"},
    {"model_averaging_period", "Arclight's DDP averages gradients every step (no post-local SGD)"}};

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Seconds of DDPStrategy's timeout, a timedelta: seconds, its text "H:MM:SS", or the forms of
// Config::duration ("DD:HH:MM:SS", {minutes: 30}).
std::optional<double> read_timedelta(const Config& args) {
  const auto value = args.get<nlohmann::json>("timeout", nullptr);
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    int hours = 0, minutes = 0, consumed = 0;
    double seconds = 0;
    if (std::count(text.begin(), text.end(), ':') == 2 &&
        std::sscanf(text.c_str(), "%d:%d:%lf%n", &hours, &minutes, &seconds, &consumed) == 3 &&
        consumed == static_cast<int>(text.size()))
      return (hours * 60.0 + minutes) * 60.0 + seconds;
  }
  return args.duration("timeout");
}

// The settings of DDPStrategyOptions that `args` gives, into `options`.
void read_ddp_settings(const Config& args, nlohmann::json& options) {
  for (const char* key :
       {"find_unused_parameters", "static_graph", "gradient_as_bucket_view", "shared_memory", "forward_prefetch"})
    if (const auto value = args.get_optional<bool>(key)) options[key] = *value;
  for (const char* key : {"bucket_cap_mb", "first_bucket_mb", "collective_timeout"})
    if (const auto value = args.get_optional<double>(key)) options[key] = *value;
  for (const char* key : {"process_group_backend", "sharding_strategy", "backward_prefetch"})
    if (const auto value = args.get_optional<std::string>(key)) options[key] = *value;
  if (const auto seconds = read_timedelta(args)) options["timeout"] = *seconds;
}

nlohmann::json ddp_options(const Config& args) {
  for (const auto& [key, instead] : kObjectArgs) {
    const auto value = args.get<nlohmann::json>(key, nullptr);
    ARC_CHECK(value.is_null(), "DDPStrategy's ", key, "=", value.dump(), " is not taken here: ", instead);
  }
  const auto start_method = args.get<std::string>("start_method", "popen");
  if (!contains(kStartMethods, start_method))
    throw Error(unknown_name_message("start_method", start_method, kStartMethods));
  // popen, Lightning's default, joins the ranks a launcher (srun, mpirun, torchrun) started and
  // starts them from the Trainer without one, which is what strategy "auto" does for several
  // processes, decided where the run starts (so that a saved config runs under a launcher too). The
  // other methods always start them from the Trainer.
  nlohmann::json options = {{"strategy", start_method == "popen" ? "auto" : "ddp_spawn"}};
  read_ddp_settings(args, options);
  ARC_CHECK(!args.get<bool>("broadcast_buffers", false), "DDPStrategy's broadcast_buffers=true is not taken here: ",
            "Arclight broadcasts buffers from rank 0 once, at setup, as broadcast_buffers=false does; keep ",
            "BatchNorm statistics the same on every rank with trainer.sync_batchnorm");
  return options;
}

// The CUDA index a torch.device spec names: "cuda" (0), "cuda:N" or N; nullopt for anything else.
std::optional<int> cuda_index(const nlohmann::json& device) {
  if (device.is_number_integer()) return device.get<int>() >= 0 ? std::optional<int>(device.get<int>()) : std::nullopt;
  if (!device.is_string()) return std::nullopt;
  const auto& text = device.get_ref<const std::string&>();
  if (text == "cuda") return 0;
  int index = -1, consumed = 0;
  if (std::sscanf(text.c_str(), "cuda:%d%n", &index, &consumed) == 1 && consumed == static_cast<int>(text.size()) &&
      index >= 0)
    return index;
  return std::nullopt;
}

// FSDPStrategy: strategy fsdp, its sharding_strategy and DDP's settings; what it cannot take is an
// error that says what stands for it.
nlohmann::json fsdp_options(const Config& args) {
  const std::vector<std::pair<std::string, std::string>> objects = {
      {"auto_wrap_policy", "FULL_SHARD's units are the module's arc::ShardedUnit submodules, chosen in its C++ code"},
      {"activation_checkpointing_policy", "Arclight has no activation checkpointing"},
      {"cpu_offload", "Arclight keeps parameters on the rank's device"},
      {"mixed_precision", "set trainer.precision"},
      {"accelerator", "set trainer.accelerator"},
      {"parallel_devices", "set trainer.devices"},
      {"cluster_environment", "set trainer.cluster_environment or name it in trainer.plugins"},
      {"precision_plugin", "set trainer.precision"}};
  for (const auto& [key, instead] : objects) {
    const auto value = args.get<nlohmann::json>(key, nullptr);
    ARC_CHECK(value.is_null() || value == false, "FSDPStrategy's ", key, "=", value.dump(),
              " is not taken here: ", instead);
  }
  nlohmann::json options = {{"strategy", "fsdp"},
                            {"state_dict_type", args.get<std::string>("state_dict_type", "full")}};
  read_ddp_settings(args, options);
  return options;
}

nlohmann::json single_device_options(const Config& args) {
  nlohmann::json options = {{"strategy", "single_device"}, {"accelerator", "cpu"}};
  const auto device = args.get<nlohmann::json>("device", "cpu");
  if (device == "cpu") return options;
  const auto index = cuda_index(device);
  ARC_CHECK(index, "SingleDeviceStrategy's device must be \"cpu\", \"cuda\", \"cuda:N\" or N, got ", device.dump());
  options["accelerator"] = "gpu";
  options["devices"] = nlohmann::json::array({*index});
  return options;
}

}  // namespace

bool is_strategy_class(const nlohmann::json& value) {
  if (value.is_object()) return true;
  if (!value.is_string()) return false;
  const auto name = detail::registered_name(value.get<std::string>());
  return contains(kSupported, name) || contains(kUnsupported, name);
}

nlohmann::json strategy_class(const std::string& name, const Config& init_args) {
  if (name == "DDPStrategy") return ddp_options(init_args);
  if (name == "FSDPStrategy") return fsdp_options(init_args);
  if (contains(kOwnStrategies, cluster::parse_strategy_name(name).name)) {
    nlohmann::json options = {{"strategy", name}};
    read_ddp_settings(init_args, options);
    if (const auto type = init_args.get_optional<std::string>("state_dict_type")) options["state_dict_type"] = *type;
    return options;
  }
  if (name == "SingleDeviceStrategy") return single_device_options(init_args);
  ARC_CHECK(!contains(kUnsupported, name), "Lightning's ", name, " has no counterpart in Arclight, whose strategies ",
            "are \"single_device\", \"ddp\", \"ddp_spawn\", \"elastic\" and \"fsdp\" (DDPStrategy, ",
            "SingleDeviceStrategy and FSDPStrategy name four of them)");
  throw Error(unknown_name_message("strategy class", name, strategy_class_names()));
}

nlohmann::json strategy_class_options(const nlohmann::json& entry, const std::string& path) {
  return detail::with_class_path(entry, path, strategy_class);
}

const std::vector<std::string>& strategy_class_names() {
  static const std::vector<std::string> names = [] {
    auto out = kSupported;
    out.insert(out.end(), kOwnStrategies.begin(), kOwnStrategies.end());
    return out;
  }();
  return names;
}

}  // namespace arc
