// DDPSpawnStrategy: DDP whose processes Arclight starts itself on this machine.
#pragma once

#include <arc/strategies/ddp_strategy.h>

namespace arc {

class SpawnLauncher;

/// Strategy "ddp_spawn": the calling process becomes rank 0 and re-executes the program once
/// per extra device; the store's port is chosen before any child starts, so runs never clash.
/// Under the `arc` tool, whose launcher starts every rank at once, rank 0 opens the store on a
/// free port and passes the port on (SpawnLauncher::join_tool_launcher). A rank that fails hands
/// its error to rank 0, whose Trainer throws it (or to the tool, which prints it).
class DDPSpawnStrategy : public DDPStrategy {
 public:
  DDPSpawnStrategy();
  ~DDPSpawnStrategy() override;
  std::string name() const override { return "ddp_spawn"; }
  /// Starts ranks 1..N-1 (rank 0 is this process), or, in a rank that a launcher started, joins it.
  std::shared_ptr<cluster::ClusterEnvironment> launch(const LaunchRequest& request) override;
  void setup(const StrategyPlan& plan) override;
  void setup_module(torch::nn::Module& module) override;
  void on_failure(const std::string& reason) override;
  void on_interrupted() override;
  void teardown() override;

 protected:
  c10::intrusive_ptr<c10d::TCPStore> hosted_store() override;
  PeerFailure peer_failure() override;

 private:
  SpawnLauncher* launcher_ = nullptr;
  /// How long rank 0 may take to notice another rank's failure (collective_timeout).
  std::chrono::milliseconds patience_{0};
  c10::intrusive_ptr<c10d::TCPStore> tool_store_;
};

}  // namespace arc
