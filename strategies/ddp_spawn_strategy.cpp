// DDPSpawnStrategy.
#include <arc/strategies/ddp_spawn_strategy.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/strategies/cluster/local_environment.h>
#include <arc/strategies/spawn_launcher.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

namespace arc {

DDPSpawnStrategy::DDPSpawnStrategy() = default;
DDPSpawnStrategy::~DDPSpawnStrategy() = default;

std::shared_ptr<cluster::ClusterEnvironment> DDPSpawnStrategy::find_environment(const TrainerOptions& options) {
  ARC_CHECK(options.num_nodes() == 1,
            "strategy 'ddp_spawn' starts processes on this machine only, got num_nodes=", options.num_nodes(),
            "; use strategy 'ddp' under srun, mpirun or torchrun for several nodes");
  if (!SpawnLauncher::is_child()) {
    const int64_t world =
        static_cast<int64_t>(resolve_accelerator(options.accelerator())->select(options.devices()).size());
    launcher_ =
        &SpawnLauncher::launch(world, std::chrono::milliseconds(static_cast<int64_t>(options.timeout() * 1000)));
    // Rank 0 reads the same variables its children got.
    setenv("RANK", "0", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("NODE_RANK", "0", 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(launcher_->port()).c_str(), 1);
  } else {
    tool_store_ =
        SpawnLauncher::join_tool_launcher(std::chrono::milliseconds(static_cast<int64_t>(options.timeout() * 1000)));
  }
  return std::make_shared<cluster::LocalEnvironment>();
}

c10::intrusive_ptr<c10d::TCPStore> DDPSpawnStrategy::hosted_store() {
  return launcher_ != nullptr ? launcher_->store() : tool_store_;
}

void DDPSpawnStrategy::setup_module(torch::nn::Module& module) {
  if (launcher_ != nullptr) launcher_->set_busy(true);
  DDPStrategy::setup_module(module);
}

void DDPSpawnStrategy::teardown() {
  if (launcher_ != nullptr) launcher_->set_busy(false);
}

void DDPSpawnStrategy::on_interrupted() {
  if (launcher_ != nullptr) launcher_->wait_interrupted();
}

void DDPSpawnStrategy::on_failure(const std::string& reason) {
  if (launcher_ != nullptr) launcher_->abort(reason);
}

}  // namespace arc
