// ElasticStrategy.
#include <arc/strategies/elastic_strategy.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/strategies/cluster/torchelastic_environment.h>

#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace arc {

namespace {

// torchrun (PyTorch 2.x) starts each worker in a session of its own, so a worker outlives an agent
// that is killed. Such an orphan would train on with the job's other workers, in a generation that
// the agent replacing the dead one cannot join, and the job would hang; it exits instead, so that
// the others fail, restart, and meet the new agent's workers.
void exit_with_agent() {
  static std::once_flag watching;
  std::call_once(watching, [] {
    const pid_t agent = getppid();
    std::thread([agent] {
      while (getppid() == agent) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      console().error(
          "elastic: torchrun's agent (pid {}) is gone; this worker exits, so that the job's other workers restart "
          "and meet those of the agent that replaces it",
          agent);
      std::_Exit(1);
    }).detach();
  });
}

}  // namespace

std::shared_ptr<cluster::ClusterEnvironment> ElasticStrategy::launch(const LaunchRequest& request) {
  ARC_CHECK(request.cluster_environment == "auto" || request.cluster_environment == "torchelastic",
            "strategy 'elastic' reads torchrun's environment, but cluster_environment is '",
            request.cluster_environment, "'; set it to \"auto\" or \"torchelastic\"");
  ARC_CHECK(cluster::TorchElasticEnvironment::detect(),
            "strategy 'elastic' runs under torchrun, which restarts failed processes, but torchrun's variables ",
            "(TORCHELASTIC_RUN_ID, RANK, LOCAL_RANK, WORLD_SIZE) are not set; start the program with ",
            "`torchrun --max_restarts=3 --nproc_per_node=N --no_python <program> ...`, or use strategy 'ddp'");
  auto environment = std::make_shared<cluster::TorchElasticEnvironment>();
  request.check(*environment);
  exit_with_agent();
  return environment;
}

void ElasticStrategy::setup(const StrategyPlan& plan) {
  DDPStrategy::setup(plan);
  console().info("elastic: start {} of this job (torchrun allows {} restarts)", restart_count() + 1,
                 cluster::env("TORCHELASTIC_MAX_RESTARTS").value_or("?"));
}

}  // namespace arc
