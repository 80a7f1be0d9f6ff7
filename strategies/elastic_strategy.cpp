// ElasticStrategy.
#include <arc/strategies/elastic_strategy.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/strategies/cluster/torchelastic_environment.h>

namespace arc {

std::shared_ptr<cluster::ClusterEnvironment> ElasticStrategy::launch(const LaunchRequest& request) {
  ARC_CHECK(request.cluster_environment == "auto" || request.cluster_environment == "torchelastic",
            "strategy 'elastic' reads torchrun's environment, but cluster_environment is '",
            request.cluster_environment, "'; set it to \"auto\" or \"torchelastic\"");
  ARC_CHECK(cluster::TorchElasticEnvironment::detect(),
            "strategy 'elastic' runs under torchrun, which restarts failed processes, but torchrun's variables ",
            "(TORCHELASTIC_RUN_ID, RANK, LOCAL_RANK, WORLD_SIZE) are not set; start the program with ",
            "`torchrun --max_restarts=3 --nproc_per_node=N --no_python <program> ...`, or use strategy 'ddp'");
  return DDPStrategy::launch(request);
}

void ElasticStrategy::setup(const StrategyPlan& plan) {
  DDPStrategy::setup(plan);
  console().info("elastic: start {} of this job (torchrun allows {} restarts)", restart_count() + 1,
                 cluster::env("TORCHELASTIC_MAX_RESTARTS").value_or("?"));
}

}  // namespace arc
