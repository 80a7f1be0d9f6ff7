// Lightning's strategy classes, as LightningCLI configs name them (trainer.strategy:
// {class_path: lightning.pytorch.strategies.DDPStrategy, init_args: {find_unused_parameters: true}}),
// read as the trainer options they stand for. Torch-free, so that the `arc` launcher reads them too.
#pragma once

#include <arc/base/config.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace arc {

/// Whether a trainer.strategy value is one of Lightning's strategy classes ({class_path, init_args},
/// or the class alone: "DDPStrategy", "lightning.pytorch.strategies.FSDPStrategy") rather than a
/// strategy's name ("ddp").
bool is_strategy_class(const nlohmann::json& value);

/// The trainer options that a Lightning strategy class and its init_args stand for:
/// - DDPStrategy: {"strategy": "auto"}, which is "ddp" under a launcher (srun, mpirun, torchrun) and
///   "ddp_spawn" without one for several devices, as Lightning's default start_method popen joins a
///   launcher's ranks or starts them itself ("ddp_spawn" for start_method spawn, fork or forkserver,
///   which always start them from the Trainer; one device runs alone), with every setting of
///   DDPStrategyOptions as given (find_unused_parameters, static_graph, gradient_as_bucket_view,
///   bucket_cap_mb, process_group_backend, timeout in seconds or a timedelta's "H:MM:SS", and
///   Arclight's own collective_timeout, first_bucket_mb and shared_memory); broadcast_buffers may be
///   false only (buffers are broadcast once, at setup);
/// - FSDPStrategy: {"strategy": "fsdp"} with sharding_strategy and DDP's settings as given;
///   state_dict_type "full" or "sharded", and no wrap policy, offload or mixed-precision objects;
/// - SingleDeviceStrategy: {"strategy": "single_device"} on its device ("cpu": accelerator cpu;
///   "cuda:N" or N: accelerator gpu, devices [N]);
/// - Arclight's own strategies by name ("ddp_spawn", "ddp", "elastic", "fsdp", "single_device", "auto"):
///   {"strategy": name} with the DDPStrategyOptions settings given, as --print_config writes them.
/// Init_args that name objects (accelerator, cluster_environment, precision_plugin, ...) and
/// Lightning's other strategies are errors that say what stands for them; `path` names the entry.
nlohmann::json strategy_class_options(const nlohmann::json& entry, const std::string& path);

/// The same for the class `name` ("DDPStrategy") and its init_args.
nlohmann::json strategy_class(const std::string& name, const Config& init_args);

/// The strategy classes taken: DDPStrategy, FSDPStrategy, SingleDeviceStrategy, and Arclight's
/// strategies' names.
const std::vector<std::string>& strategy_class_names();

}  // namespace arc
