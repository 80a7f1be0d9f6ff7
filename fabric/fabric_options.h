// FabricOptions: what arc::Fabric is built from — Lightning's Fabric arguments and the launch
// settings that a Fabric reads, nothing that it would ignore.
#pragma once

#include <arc/base/arg.h>
#include <arc/base/devices.h>
#include <arc/strategies/strategy.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace arc {

class Logger;

/// The base of a Fabric's callbacks (FabricOptions::callbacks), as Lightning's Fabric takes any
/// object: derive from it, give your class the hook methods your loop calls, and call them with
/// Fabric::call.
class FabricCallback {
 public:
  virtual ~FabricCallback() = default;
};

/// Lightning's Fabric(accelerator, strategy, devices, num_nodes, precision, callbacks, loggers),
/// then where and how its processes run. A Trainer makes one from its TrainerOptions
/// (TrainerOptions::fabric_options), so that both resolve a run alike. Defaults are Lightning's.
class FabricOptions {
  /// "auto", "cpu", "gpu" or "cuda".
  ARC_ARG(std::string, accelerator) = "auto";
  /// "auto" or a registered strategy name ("single_device", "ddp", "ddp_spawn", "elastic", ...).
  ARC_ARG(std::string, strategy) = "auto";
  /// "auto", a count (-1 = all), indices: `devices(2)`, `devices({0, 1})`, `devices("auto")`.
  ARC_ARG(Devices, devices);
  /// Machines the run spans.
  ARC_ARG(int64_t, num_nodes) = 1;
  /// Lightning's names: "32-true" (also "32"), "64-true", "bf16-mixed", "16-mixed", "bf16-true",
  /// "16-true" (see Precision).
  ARC_ARG(std::string, precision) = "32-true";
  /// What Fabric::call calls, in this order.
  ARC_ARG(std::vector<std::shared_ptr<FabricCallback>>, callbacks);
  /// What Fabric::log and log_dict write to; every rank agrees on their versions.
  ARC_ARG(std::vector<std::shared_ptr<Logger>>, loggers);

  /// Seeds LibTorch's generators when the Fabric is made, and the data order of prepare(data)
  /// (unset: not seeded, and the order takes seed 0).
  ARC_ARG(std::optional<uint64_t>, seed);
  /// Intra-op threads per process; 0 = the cores divided among this machine's processes.
  ARC_ARG(int64_t, num_threads) = 0;
  /// "auto" (detect: torchelastic > slurm > lsf > mpi > kubeflow > local) or one of those names.
  ARC_ARG(std::string, cluster_environment) = "auto";
  /// The SLURM environment's settings (Lightning's SLURMEnvironment): requeue on a signal.
  ARC_ARG(cluster::SlurmEnvironmentOptions, slurm);
  /// The DDP strategy's settings (Lightning's DDPStrategy), for ddp, ddp_spawn and elastic: timeouts,
  /// buckets, unused parameters, the process group's backend, shared memory.
  ARC_ARG(DDPStrategyOptions, ddp);
  /// DDP: the model's arc::SyncBatchNorm layers normalize with every rank's statistics.
  ARC_ARG(bool, sync_batchnorm) = false;

 public:
  /// Intra-op threads for one of `local_processes` processes sharing this machine: num_threads, or
  /// the cores divided among the processes.
  int64_t threads_per_process(int64_t local_processes) const;
  /// Throws arc::Error naming the first impossible value and the remedy.
  void validate() const;
};

}  // namespace arc
