// ElasticStrategy: DDP under torchrun with --max_restarts. When a process fails, torchrun
// restarts the whole group; every start resumes from the newest complete checkpoint.
#pragma once

#include <arc/strategies/ddp_strategy.h>

namespace arc {

/// Strategy "elastic": ranks, address and attempt from torchrun's environment; the Trainer adds
/// a periodic ElasticCheckpoint and resumes fit from the newest checkpoint by itself.
class ElasticStrategy : public DDPStrategy {
 public:
  std::string name() const override { return "elastic"; }
  /// torchrun's environment; an error without it.
  std::shared_ptr<cluster::ClusterEnvironment> launch(const LaunchRequest& request) override;
  void setup(const StrategyPlan& plan) override;
  bool elastic() const override { return true; }
};

}  // namespace arc
