// resolve_run.
#include <arc/core/detail/accelerator_connector.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/strategies/strategy.h>

#include <algorithm>

namespace arc::detail {
namespace {

std::chrono::milliseconds timeout_of(const TrainerOptions& options) {
  return std::chrono::milliseconds(static_cast<int64_t>(options.timeout() * 1000));
}

DDPOptions ddp_options(const TrainerOptions& options) {
  DDPOptions ddp;
  ddp.timeout = timeout_of(options);
  ddp.collective_timeout =
      std::min(ddp.timeout, std::chrono::milliseconds(static_cast<int64_t>(options.collective_timeout() * 1000)));
  ddp.first_bucket_bytes = static_cast<int64_t>(options.first_bucket_mb() * (1 << 20));
  ddp.bucket_bytes = static_cast<int64_t>(options.bucket_cap_mb() * (1 << 20));
  ddp.find_unused_parameters = cluster::parse_strategy_name(options.strategy())
                                   .find_unused_parameters.value_or(options.find_unused_parameters());
  ddp.static_graph = options.static_graph();
  ddp.gradient_as_bucket_view = options.gradient_as_bucket_view();
  ddp.shared_memory = options.shared_memory();
  ddp.process_group_backend = options.process_group_backend();
  return ddp;
}

// What "auto" devices are: under a launcher, the processes it started on this node.
Devices auto_devices(const cluster::ClusterEnvironment* environment) {
  if (environment != nullptr && environment->creates_processes_externally())
    return Devices::of_count(environment->local_world_size());
  return Devices::automatic();
}

}  // namespace

ResolvedRun resolve_run(const TrainerOptions& options) {
  ResolvedRun run;
  run.accelerator = resolve_accelerator(options.accelerator());
  LaunchRequest request;
  request.processes = run.accelerator->count(options.devices());
  request.devices_auto = options.devices().is_auto;
  request.num_nodes = options.num_nodes();
  request.cluster_environment = options.cluster_environment();
  request.requeue = {options.auto_requeue(), options.requeue_signal()};
  request.timeout = timeout_of(options);
  run.strategy = resolve_strategy(options.strategy(), request.processes, options.num_nodes());

  StrategyPlan plan;
  plan.accelerator = run.accelerator.get();
  // Devices named outright are selected before the launch, so that ddp_spawn starts no rank only
  // for it to fail on them.
  if (!options.devices().is_auto) plan.devices = run.accelerator->select(options.devices());
  plan.environment = run.strategy->launch(request);
  run.cluster_environment = plan.environment && plan.environment->creates_processes_externally()
                                ? plan.environment
                                : cluster::detect(request.requeue);
  if (options.devices().is_auto) plan.devices = run.accelerator->select(auto_devices(plan.environment.get()));
  plan.num_nodes = options.num_nodes();
  run.threads_per_process = options.threads_per_process(plan.environment ? plan.environment->local_world_size() : 1);
  plan.threads_per_process = run.threads_per_process;
  plan.ddp = ddp_options(options);
  run.strategy->setup(plan);
  run.precision = std::make_unique<Precision>(options.precision(), run.strategy->root_device());
  return run;
}

}  // namespace arc::detail
