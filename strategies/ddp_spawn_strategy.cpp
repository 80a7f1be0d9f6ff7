// DDPSpawnStrategy.
#include <arc/strategies/ddp_spawn_strategy.h>

#include <arc/strategies/cluster/local_environment.h>
#include <arc/strategies/detail/rank_processes.h>
#include <arc/strategies/detail/spawn_launcher.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

namespace arc {

DDPSpawnStrategy::DDPSpawnStrategy() = default;
DDPSpawnStrategy::~DDPSpawnStrategy() = default;

std::shared_ptr<cluster::ClusterEnvironment> DDPSpawnStrategy::launch(const LaunchRequest& request) {
  ARC_CHECK(request.num_nodes == 1,
            "strategy 'ddp_spawn' starts processes on this machine only, got num_nodes=", request.num_nodes,
            "; use strategy 'ddp' under srun, mpirun or torchrun for several nodes");
  if (!SpawnLauncher::is_child()) {
    launcher_ = &SpawnLauncher::launch(request.processes, request.timeout);
    // Rank 0 gets the variables its children got, so that every rank reads one environment.
    for (const auto& [name, value] : rank_variables(0, request.processes, launcher_->port()))
      setenv(name.c_str(), value.c_str(), 1);
  } else {
    tool_store_ = SpawnLauncher::join_tool_launcher(request.timeout);
  }
  auto environment = std::make_shared<cluster::LocalEnvironment>();
  request.check(*environment);
  return environment;
}

c10::intrusive_ptr<c10d::TCPStore> DDPSpawnStrategy::hosted_store() {
  return launcher_ != nullptr ? launcher_->store() : tool_store_;
}

PeerFailure DDPSpawnStrategy::peer_failure() {
  if (launcher_ == nullptr) return {};
  return [launcher = launcher_](std::chrono::milliseconds wait) { return launcher->take_failure(wait); };
}

// The rendezvous waits for the other ranks: rank 0 is busy.
void DDPSpawnStrategy::setup(const StrategyPlan& plan) {
  patience_ = plan.ddp.collective_timeout_duration();
  if (launcher_ == nullptr) return DDPStrategy::setup(plan);
  launcher_->set_busy(true, patience_);
  try {
    DDPStrategy::setup(plan);
  } catch (...) {
    launcher_->set_busy(false, patience_);
    throw;
  }
  launcher_->set_busy(false, patience_);
}

void DDPSpawnStrategy::setup_module(torch::nn::Module& module) {
  if (launcher_ != nullptr) {
    launcher_->check();
    launcher_->set_busy(true, patience_);
  }
  DDPStrategy::setup_module(module);
}

void DDPSpawnStrategy::teardown() {
  DDPStrategy::teardown();
  if (launcher_ != nullptr) launcher_->set_busy(false, patience_);
}

void DDPSpawnStrategy::on_interrupted() {
  if (launcher_ != nullptr) launcher_->wait_interrupted();
}

// Rank 0 stops the others; another rank hands its error to the launcher that started it.
void DDPSpawnStrategy::on_failure(const std::string& reason) {
  if (launcher_ != nullptr)
    launcher_->abort(reason);
  else
    report_to_launcher("error", reason);
}

}  // namespace arc
