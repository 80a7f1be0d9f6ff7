// resolve_run.
#include <arc/fabric/detail/connector.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/strategies/strategy.h>

#include <algorithm>

namespace arc::detail {
namespace {

// The options' DDP settings, with find_unused_parameters as a strategy name such as
// "ddp_find_unused_parameters_true" sets it.
DDPStrategyOptions ddp_options(const FabricOptions& options) {
  DDPStrategyOptions ddp = options.ddp();
  if (const auto named = cluster::parse_strategy_name(options.strategy()).find_unused_parameters)
    ddp.find_unused_parameters(*named);
  return ddp;
}

// What "auto" devices are: under a launcher, the processes it started on this node.
Devices auto_devices(const cluster::ClusterEnvironment* environment) {
  if (environment != nullptr && environment->creates_processes_externally())
    return Devices::of_count(environment->local_world_size());
  return Devices::automatic();
}

}  // namespace

ResolvedRun resolve_run(const FabricOptions& options) {
  ResolvedRun run;
  run.accelerator = resolve_accelerator(options.accelerator());
  LaunchRequest request;
  request.processes = run.accelerator->count(options.devices());
  request.devices_auto = options.devices().is_auto;
  request.num_nodes = options.num_nodes();
  request.cluster_environment = options.cluster_environment();
  request.slurm = options.slurm();
  request.timeout = options.ddp().timeout_duration();
  run.strategy = resolve_strategy(options.strategy(), request.processes, options.num_nodes());

  StrategyPlan plan;
  plan.accelerator = run.accelerator.get();
  // Devices named outright are selected before the launch, so that ddp_spawn starts no rank only
  // for it to fail on them.
  if (!options.devices().is_auto) plan.devices = run.accelerator->select(options.devices());
  plan.environment = run.strategy->launch(request);
  run.cluster_environment = plan.environment && plan.environment->creates_processes_externally()
                                ? plan.environment
                                : cluster::detect(request.slurm);
  if (options.devices().is_auto) plan.devices = run.accelerator->select(auto_devices(plan.environment.get()));
  plan.num_nodes = options.num_nodes();
  run.threads_per_process = options.threads_per_process(plan.environment ? plan.environment->local_world_size() : 1);
  plan.threads_per_process = run.threads_per_process;
  plan.ddp = ddp_options(options);
  run.strategy->setup(plan);
  run.precision = std::make_unique<Precision>(options.precision(), run.strategy->root_device(), run.strategy.get());
  return run;
}

}  // namespace arc::detail
