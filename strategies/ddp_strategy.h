// DDPStrategy: data-parallel training over processes that an HPC launcher started (srun,
// mpirun, torchrun): parameters broadcast from rank 0, gradients averaged by a bucketed
// reducer that overlaps with backward. ddp_spawn runs the same core.
#pragma once

#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/grad_reducer.h>
#include <arc/strategies/sharded_reducer.h>
#include <arc/strategies/strategy.h>

#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <optional>
#include <unordered_set>

namespace c10d {
class TCPStore;
}

namespace arc {

/// Strategy "ddp": one process per device, ranks from the detected cluster environment.
class DDPStrategy : public Strategy {
 public:
  std::string name() const override { return "ddp"; }
  std::shared_ptr<cluster::ClusterEnvironment> launch(const LaunchRequest& request) override;
  void setup(const StrategyPlan& plan) override;
  torch::Device root_device() const override { return device_; }
  void setup_module(torch::nn::Module& module) override;
  void backward(const torch::Tensor& loss) override;
  bool agree_on_skip(bool skipped) override;
  bool optimizer_step(torch::optim::Optimizer& optimizer, const std::function<bool()>& step) override;
  double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) override;
  bool sharded() const override { return shard_ && sharding_ != "NO_SHARD"; }
  std::vector<int64_t> state_owners(const torch::optim::Optimizer& optimizer) const override;
  bool parameters_sharded() const override { return !units_.empty() || !built_.empty(); }
  void build_model(const std::function<void()>& configure) override;
  /// Under FULL_SHARD: gathers the parameters of the units that were made whole, so that those are
  /// whole after the stage; units that build_model sharded stay sharded.
  void teardown() override;
  void with_whole_parameters(const std::function<void()>& fn) override;
  /// Makes this strategy fsdp: sharded as the sharding_strategy option says (SHARD_GRAD_OP by
  /// default), before setup.
  void shard() { shard_ = true; }
  /// The ownership of the parameters that require gradients now (null unless sharded).
  const ShardLayout* shard_layout() const;
  /// The rank owning `parameter` under sharding, fixed at setup for every parameter of the module
  /// (whatever requires gradients later, so that no optimizer state ever moves); nullopt unless
  /// sharded and one of the module's.
  std::optional<int64_t> owner_of(const torch::Tensor& parameter) const override;
  int64_t owner_rank() const override { return hybrid_ ? local_rank_ : rank_; }
  bool sharded_checkpoints() const override { return sharded_checkpoints_; }
  void set_gradient_sync(bool sync) override { sync_ = sync; }
  int64_t world_size() const override { return world_size_; }
  int64_t global_rank() const override { return rank_; }
  int64_t local_rank() const override { return local_rank_; }
  int64_t local_world_size() const override { return local_world_size_; }
  Collectives* collectives() override { return collectives_.get(); }
  int64_t restart_count() const override { return environment_->restart_count(); }

 protected:
  /// The rendezvous store this process already hosts, if any (ddp_spawn's rank 0).
  virtual c10::intrusive_ptr<c10d::TCPStore> hosted_store();
  /// What a launcher in this process knows of the other ranks' failures (ddp_spawn's rank 0).
  virtual PeerFailure peer_failure() { return {}; }

 private:
  std::shared_ptr<cluster::ClusterEnvironment> environment_;
  std::unique_ptr<Collectives> collectives_;
  /// Under HYBRID_SHARD on several nodes: the group of this node, among which the parameters are
  /// divided (its reduce_scatter sums over every rank).
  std::unique_ptr<Collectives> hybrid_;
  /// The group among which the parameters are divided: hybrid_'s, else every rank's.
  Collectives& shard_group() const { return hybrid_ ? *hybrid_ : *collectives_; }
  /// Whether the units' parameters are sharded (FULL_SHARD, HYBRID_SHARD).
  bool full_shard() const { return sharding_ == "FULL_SHARD" || sharding_ == "HYBRID_SHARD"; }
  /// The reducer for the parameters that require gradients now: the last one while they are the
  /// same, else the one before it (toggle_optimizer alternates between two sets), else one made for
  /// them once the ranks agree on them (a finetuning callback unfroze a backbone); null without any.
  GradientReduction* reducer();
  /// Throws unless every rank's parameters require gradients alike (`trainable` is this rank's).
  void check_ranks_train_alike(const std::vector<bool>& trainable);

  /// The reduction for the parameters now trainable, and under sharding their owners and the
  /// layout whose parameters go to every rank after a step (FULL_SHARD: those outside the units).
  struct Reducer {
    std::vector<bool> trainable;  // per parameter of the module
    std::shared_ptr<ShardLayout> layout;
    std::shared_ptr<ShardLayout> shared;
    std::unique_ptr<GradientReduction> reducer;
  };
  Reducer make_reducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names) const;
  /// FULL_SHARD: a UnitGather for each arc::ShardedUnit of `module` (a parameter belongs to its
  /// innermost unit), its parameters of other ranks released.
  void make_units(torch::nn::Module& module);
  const torch::nn::Module* reduced_module_ = nullptr;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;
  /// The reducer in use first, then the one before it.
  std::vector<Reducer> reducers_;
  /// The reducer of the last gradient reduction, whose vote agree_on_skip reads.
  GradientReduction* reducing_ = nullptr;
  ReducerOptions reducer_options_;
  bool shard_ = false;
  /// Under sharding: every parameter of the module and its owner.
  std::unique_ptr<ShardLayout> ownership_;
  /// Under FULL_SHARD: the units, and their parameters.
  std::vector<std::shared_ptr<UnitGather>> units_;
  /// The units' shardings that build_model made (their parameters never whole on one rank).
  std::vector<std::shared_ptr<UnitGather>> built_;
  /// The units' order, where their gathers start ahead (null: they do not).
  std::shared_ptr<UnitOrder> unit_order_;
  bool forward_prefetch_ = false;
  std::string backward_prefetch_ = "BACKWARD_PRE";
  std::vector<std::weak_ptr<ShardedUnitBase>> unit_modules_;
  std::unordered_set<const void*> unit_parameters_;
  /// The sharding_strategy option, "auto" resolved.
  std::string sharding_ = "NO_SHARD";
  bool sharded_checkpoints_ = false;
  torch::Device device_{torch::kCPU};
  int64_t world_size_ = 1;
  int64_t rank_ = 0;
  int64_t local_rank_ = 0;
  int64_t local_world_size_ = 1;
  bool sync_ = true;
};

}  // namespace arc
