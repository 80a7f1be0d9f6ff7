// resolve_run: the one place a run is resolved from FabricOptions, as Lightning's fabric
// _Connector — for arc::Fabric and the Trainer (from TrainerOptions::fabric_options) alike.
#pragma once

#include <arc/fabric/fabric_options.h>
#include <arc/fabric/precision.h>

#include <cstdint>
#include <memory>

namespace arc {

class AcceleratorBackend;
class Strategy;

namespace cluster {
class ClusterEnvironment;
}

namespace detail {

/// What a run is: hardware, process topology (launched and joined), precision, threads.
struct ResolvedRun {
  std::shared_ptr<AcceleratorBackend> accelerator;
  std::shared_ptr<Strategy> strategy;
  std::unique_ptr<Precision> precision;
  /// The launcher this job runs under, whatever the strategy (a SLURM job that runs one process or
  /// spawns its ranks still requeues): the signal connector asks it.
  std::shared_ptr<cluster::ClusterEnvironment> cluster_environment;
  /// Intra-op threads for this process, its share of the machine's cores.
  int64_t threads_per_process = 1;
};

/// Picks the accelerator and the strategy, runs the strategy's launch step (ddp_spawn starts its
/// ranks here), selects this node's devices — the only place that does; devices named outright
/// before the launch, "auto" after it, as the launcher's processes — and sets the strategy up.
ResolvedRun resolve_run(const FabricOptions& options);

}  // namespace detail
}  // namespace arc
