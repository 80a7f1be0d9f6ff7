// DDPStrategy.
#include <arc/strategies/ddp_strategy.h>

#include <arc/base/console.h>
#include <arc/base/detail/host.h>
#include <arc/strategies/detail/process_group.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

namespace arc {
namespace {

// Whether CUDA tensors go through NCCL, from the trainer's process_group_backend.
bool use_nccl(const std::string& backend, c10::Device device) {
  if (backend == "gloo") return false;
  if (backend == "auto") return device.is_cuda() && nccl_available();
  ARC_CHECK(device.is_cuda(), "process_group_backend 'nccl' needs GPU ranks, but this rank runs on ", device.str(),
            "; set accelerator to \"gpu\", or process_group_backend to \"gloo\" or \"auto\"");
  // A GPU rank means LibTorch has CUDA: what can be missing is NCCL, not found when this was built.
  ARC_CHECK(nccl_available(), "process_group_backend 'nccl' was asked for, but NCCL was not found when this ",
            "build was configured; use \"gloo\" or \"auto\", or rebuild with NCCL_HOME set to NCCL's folder");
  return true;
}

// A rank whose launcher dies exits with it, as it would with its node: an orphan would train on
// alone, or, under strategy elastic, with the other nodes' ranks, in a generation that the agent
// replacing the dead one cannot join, and the job would hang. Exiting, it makes the others fail (and
// restart, under elastic). `advice` says what the user does then.
void exit_with_launcher(const std::string& launcher, const std::string& advice) {
  static std::once_flag watching;
  std::call_once(watching, [launcher, advice] {
    const pid_t parent = getppid();
    std::thread([launcher, advice, parent] {
      while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      console().error(
          "{} (pid {}), which started this rank, is gone, so the rank exits too, as it would with its "
          "node; {}",
          launcher, parent, advice);
      std::_Exit(1);
    }).detach();
  });
}

}  // namespace

std::shared_ptr<cluster::ClusterEnvironment> DDPStrategy::launch(const LaunchRequest& request) {
  auto found = request.cluster_environment == "auto"
                   ? cluster::detect(request.slurm)
                   : cluster::cluster_registry().create(request.cluster_environment, request.slurm);
  ARC_CHECK(found->creates_processes_externally(),
            "strategy 'ddp' joins processes started by srun, mpirun or torchrun, but ", found->no_launcher_reason());
  request.check(*found);
  if (const auto launcher = found->parent_launcher())
    exit_with_launcher(
        *launcher, elastic() ? "start torchrun again on this node: it rejoins the running job" : "start the job again");
  return found;
}

c10::intrusive_ptr<c10d::TCPStore> DDPStrategy::hosted_store() { return {}; }

void DDPStrategy::setup(const StrategyPlan& plan) {
  environment_ = plan.environment;
  world_size_ = environment_->world_size();
  rank_ = environment_->global_rank();
  local_rank_ = environment_->local_rank();
  local_world_size_ = environment_->local_world_size();
  set_console_rank(rank_, world_size_);
  const auto& selected = plan.devices;
  ARC_CHECK(local_rank_ < static_cast<int64_t>(selected.size()), "local rank ", local_rank_,
            " has no device among the ", selected.size(), " selected; set devices to the processes per node");
  device_ = selected[static_cast<size_t>(local_rank_)];
  const bool nccl = use_nccl(plan.ddp.process_group_backend(), device_);
  ARC_CHECK(!shard_ || !plan.ddp.static_graph(), "static_graph is a setting of DDP's gradient buckets, which ",
            "strategy fsdp does not use; turn it off (find_unused_parameters=true allows parameters without gradient)");
  ARC_CHECK(!nccl || std::count(selected.begin(), selected.end(), device_) == 1, "devices lists ", device_.str(),
            " more than once, and NCCL cannot run two ranks on one GPU; list each GPU once, or set ",
            "process_group_backend to \"gloo\" to share it");
  plan.accelerator->setup_device(device_);
  const auto& sharding = plan.ddp.sharding_strategy();
  ARC_CHECK(shard_ || sharding == "auto", "sharding_strategy '", sharding, "' is for strategy \"fsdp\", but this ",
            "run's strategy is \"", name(), "\"; set strategy to \"fsdp\", or leave sharding_strategy at \"auto\"");
  if (shard_) sharding_ = sharding == "auto" ? "SHARD_GRAD_OP" : sharding;
  ARC_CHECK(shard_ || plan.ddp.state_dict_type() == "full", "state_dict_type \"", plan.ddp.state_dict_type(),
            "\" is for strategy \"fsdp\", but this run's strategy is \"", name(), "\"; set strategy to \"fsdp\", or ",
            "leave state_dict_type at \"full\"");
  sharded_checkpoints_ = shard_ && plan.ddp.state_dict_type() == "sharded";
  ARC_CHECK(full_shard() || (!plan.ddp.forward_prefetch() && plan.ddp.backward_prefetch() == "BACKWARD_PRE"),
            "forward_prefetch=", plan.ddp.forward_prefetch() ? "true" : "false", " and backward_prefetch \"",
            plan.ddp.backward_prefetch(), "\" are for strategy \"fsdp\" with sharding_strategy \"FULL_SHARD\" or ",
            "\"HYBRID_SHARD\", whose units gather parameters, but this run's strategy is \"",
            shard_ ? "fsdp\" with \"" + sharding_ : name(), "\"; leave them at false and \"BACKWARD_PRE\"");
  forward_prefetch_ = plan.ddp.forward_prefetch();
  backward_prefetch_ = plan.ddp.backward_prefetch();
  // A unit's gathers run inside backward, between the gradient reductions: every rank's backward must
  // reach the same units in the same order.
  ARC_CHECK(!full_shard() || !plan.ddp.find_unused_parameters(), sharding_, " gathers each unit's ",
            "parameters during backward, so every rank's backward must use the same parameters, but ",
            "find_unused_parameters is on; turn it off (use every parameter in the loss), or use sharding_strategy ",
            "\"SHARD_GRAD_OP\"");
  reducer_options_ = ReducerOptions()
                         .first_bucket_bytes(static_cast<int64_t>(plan.ddp.first_bucket_mb() * (1 << 20)))
                         .bucket_bytes(static_cast<int64_t>(plan.ddp.bucket_cap_mb() * (1 << 20)))
                         .find_unused_parameters(plan.ddp.find_unused_parameters())
                         .static_graph(plan.ddp.static_graph())
                         .gradient_as_bucket_view(plan.ddp.gradient_as_bucket_view());
  RendezvousOptions rendezvous;
  rendezvous.address = environment_->main_address();
  rendezvous.port = environment_->main_port();
  rendezvous.rank = rank_;
  rendezvous.world_size = world_size_;
  rendezvous.timeout = plan.ddp.timeout_duration();
  rendezvous.collective_timeout = plan.ddp.collective_timeout_duration();
  rendezvous.node = host_name() + "#" + std::to_string(environment_->node_rank());
  rendezvous.shared_memory = plan.ddp.shared_memory() && device_.is_cpu();
  rendezvous.nccl = nccl;
  fit_shm_to_cores(rendezvous, local_world_size_, plan.threads_per_process);
  rendezvous.store_hosted_elsewhere = environment_->launcher_hosts_store();
  rendezvous.peer_failure = peer_failure();
  hybrid_.reset();
  if (sharding_ == "HYBRID_SHARD" && world_size_ > local_world_size_) {
    auto groups = make_hybrid_collectives(rendezvous, hosted_store(), local_rank_, local_world_size_);
    collectives_ = std::move(groups.world);
    hybrid_ = std::move(groups.shard);
  } else {
    collectives_ = make_collectives(rendezvous, hosted_store());
  }
  // A small first bucket only starts the first all-reduce early. Where all-reduces cannot overlap
  // backward, every bucket is one more wait for the slowest rank, so all are of one size; the
  // ranks' buckets must match, so one rank that can overlap keeps the small first bucket for all.
  auto votes = torch::tensor({collectives_->all_reduce_overlaps(torch::TensorOptions().device(device_)) ? 1L : 0L});
  {
    const CollectiveName name("bucket layout");
    collectives_->all_reduce(votes, Reduce::max).wait();
  }
  const bool overlaps = votes.item<int64_t>() != 0;
  if (!overlaps) reducer_options_.first_bucket_bytes(reducer_options_.bucket_bytes());
  if (rank_ == 0)
    console().info("{}: gradient buckets of {:g} MiB, the first {:g} MiB{}", name(),
                   static_cast<double>(reducer_options_.bucket_bytes()) / (1 << 20),
                   static_cast<double>(reducer_options_.first_bucket_bytes()) / (1 << 20),
                   overlaps ? "" : " (all-reduces cannot overlap backward here)");
  console().info("{}: rank {} of {} on {} ({} environment, {} at {}:{})", name(), rank_, world_size_, device_.str(),
                 environment_->name(), collectives_->backend(), rendezvous.address, rendezvous.port);
  if (shard_ && rank_ == 0) console().info("fsdp: sharding_strategy {}", sharding_);
  if (hybrid_ && rank_ == 0)
    console().info("fsdp: HYBRID_SHARD shards over the {} ranks of each node and replicates across {} nodes ({})",
                   local_world_size_, world_size_ / local_world_size_, hybrid_->backend());
}

namespace {

// Gives the parameters `order` names, largest first (in `order` among equals), each to the rank with
// the fewest bytes in `loads`, which counts them.
void give_to_least_loaded(const std::vector<torch::Tensor>& parameters, std::vector<size_t> order,
                          std::vector<int64_t>& loads, std::vector<int64_t>& owners) {
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return parameters[a].nbytes() > parameters[b].nbytes(); });
  for (const size_t p : order) {
    const auto least = std::min_element(loads.begin(), loads.end());
    owners[p] = least - loads.begin();
    *least += static_cast<int64_t>(parameters[p].nbytes());
  }
}

// FULL_SHARD while the model is built: each unit made gets owners for the parameters that no unit
// made before it holds (largest first, each to the rank that owns the fewest bytes so far), and the
// other ranks' are freed at once, so that a rank holds at most one unit whole besides its own.
class ShardingBuilder : public UnitBuilder {
 public:
  ShardingBuilder(int64_t world_size, int64_t rank, Collectives& group, std::vector<std::shared_ptr<UnitGather>>& made)
      : world_size_(world_size), rank_(rank), group_(group), made_(made), loads_(static_cast<size_t>(world_size), 0) {}

  void built(ShardedUnitBase& unit) override {
    std::vector<torch::Tensor> parameters;
    std::vector<std::string> names;
    for (const auto& item : unit.named_parameters())
      if (taken_.insert(item.value().unsafeGetTensorImpl()).second) {
        parameters.push_back(item.value());
        names.push_back(unit.name() + "." + item.key());
      }
    if (parameters.empty()) return;
    std::vector<size_t> order(parameters.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<int64_t> owners(parameters.size());
    give_to_least_loaded(parameters, order, loads_, owners);
    auto gather = std::make_shared<UnitGather>(parameters, names, owners, world_size_, rank_, group_);
    gather->release();
    unit.shard_with(gather);
    made_.push_back(std::move(gather));
  }

 private:
  int64_t world_size_, rank_;
  Collectives& group_;
  std::vector<std::shared_ptr<UnitGather>>& made_;
  std::vector<int64_t> loads_;
  std::unordered_set<const void*> taken_;
};

// The owners that the module's units sharded before setup (by build_model) gave their parameters.
std::unordered_map<const void*, int64_t> sharded_before(torch::nn::Module& module) {
  std::unordered_map<const void*, int64_t> owners;
  for (const auto& child : module.modules(false))
    if (const auto unit = std::dynamic_pointer_cast<ShardedUnitBase>(child))
      if (const auto gather = std::dynamic_pointer_cast<UnitGather>(unit->sharding())) {
        const auto& layout = gather->layout();
        for (size_t p = 0; p < layout.parameters().size(); ++p)
          owners[layout.parameters()[p].unsafeGetTensorImpl()] = layout.owner(p);
      }
  return owners;
}

// Every parameter's owner: those of `given`, and the others, largest first, each to the rank that
// owns the fewest bytes so far; empty (ShardLayout's own choice) when nothing is given.
std::vector<int64_t> owners_with(const std::vector<torch::Tensor>& parameters,
                                 const std::unordered_map<const void*, int64_t>& given, int64_t world_size) {
  if (given.empty()) return {};
  std::vector<int64_t> owners(parameters.size(), -1), loads(static_cast<size_t>(world_size), 0);
  std::vector<size_t> rest;
  for (size_t i = parameters.size(); i-- > 0;) {
    const auto found = given.find(parameters[i].unsafeGetTensorImpl());
    if (found == given.end()) {
      rest.push_back(i);
      continue;
    }
    owners[i] = found->second;
    loads[static_cast<size_t>(found->second)] += static_cast<int64_t>(parameters[i].nbytes());
  }
  give_to_least_loaded(parameters, rest, loads, owners);
  return owners;
}

}  // namespace

void DDPStrategy::build_model(const std::function<void()>& configure) {
  if (!full_shard()) return configure();
  auto& group = shard_group();
  ShardingBuilder builder(group.world_size(), group.rank(), group, built_);
  with_unit_builder(builder, configure);
}

void DDPStrategy::setup_module(torch::nn::Module& module) {
  Strategy::setup_module(module);
  torch::NoGradGuard no_grad;
  // Parameters of units that build_model sharded keep their owner's values (every rank made the
  // same ones where every rank is seeded alike) and have no memory elsewhere.
  const auto made_sharded = sharded_before(module);
  std::vector<torch::Tensor> state;
  for (const auto& p : module.parameters())
    if (made_sharded.count(p.unsafeGetTensorImpl()) == 0) state.push_back(p);
  for (const auto& b : module.buffers()) state.push_back(b);
  // Rank 0's bytes, whatever the types: a tensor of 64 MiB or more alone and in place, smaller ones
  // packed together up to that size, so that a large model costs no copy of itself.
  constexpr int64_t kPackBytes = 64 << 20;
  const CollectiveName name("parameter broadcast");
  const auto bytes_of = [](const torch::Tensor& t) {
    return t.detach().contiguous().reshape({-1}).view(torch::kUInt8);
  };
  for (size_t begin = 0, end = 0; begin < state.size(); begin = end) {
    int64_t bytes = 0;
    for (end = begin; end < state.size(); ++end) {
      const auto size = static_cast<int64_t>(state[end].nbytes());
      if (end > begin && bytes + size > kPackBytes) break;
      bytes += size;
    }
    if (end == begin + 1 && state[begin].is_contiguous()) {
      collectives_->broadcast(bytes_of(state[begin]), 0);
      continue;
    }
    std::vector<torch::Tensor> flat;
    for (size_t i = begin; i < end; ++i) flat.push_back(bytes_of(state[i]));
    auto packed = torch::cat(flat);
    collectives_->broadcast(packed, 0);
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const auto size = static_cast<int64_t>(state[i].nbytes());
      if (state[i].is_contiguous()) {
        bytes_of(state[i]).copy_(packed.narrow(0, offset, size));
      } else {
        state[i].copy_(packed.narrow(0, offset, size).view(state[i].scalar_type()).view(state[i].sizes()));
      }
      offset += size;
    }
  }
  if (reduced_module_ == &module) return;
  reduced_module_ = &module;
  parameters_.clear();
  names_.clear();
  reducers_.clear();
  for (const auto& item : module.named_parameters()) {
    parameters_.push_back(item.value());
    names_.push_back(item.key());
  }
  ownership_.reset();
  if (sharded() && !parameters_.empty()) {
    auto& group = shard_group();
    ownership_ = std::make_unique<ShardLayout>(parameters_, group.world_size(), group.rank(),
                                               reducer_options_.first_bucket_bytes(), reducer_options_.bucket_bytes(),
                                               0, owners_with(parameters_, made_sharded, group.world_size()));
    if (full_shard()) make_units(module);
  }
  reducer();
}

void DDPStrategy::make_units(torch::nn::Module& module) {
  units_.clear();
  unit_modules_.clear();
  unit_parameters_.clear();
  std::vector<std::shared_ptr<ShardedUnitBase>> found;
  std::unordered_map<const void*, size_t> innermost;
  for (const auto& child : module.modules(false))
    if (auto unit = std::dynamic_pointer_cast<ShardedUnitBase>(child)) {
      for (const auto& parameter : unit->parameters()) innermost[parameter.unsafeGetTensorImpl()] = found.size();
      found.push_back(std::move(unit));
    }
  std::vector<std::vector<size_t>> members(found.size());
  int64_t unit_bytes = 0, all_bytes = 0;
  std::unordered_map<const void*, size_t> seen;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto [first, fresh] = seen.emplace(parameters_[i].unsafeGetTensorImpl(), i);
    ARC_CHECK(fresh, "FULL_SHARD gives each parameter one owner, but '", names_[first->second], "' and '", names_[i],
              "' are one tensor (tied weights); give each its own tensor, or use sharding_strategy \"SHARD_GRAD_OP\"");
    all_bytes += static_cast<int64_t>(parameters_[i].nbytes());
    const auto unit = innermost.find(parameters_[i].unsafeGetTensorImpl());
    if (unit == innermost.end()) continue;
    members[unit->second].push_back(i);
    unit_parameters_.insert(parameters_[i].unsafeGetTensorImpl());
    unit_bytes += static_cast<int64_t>(parameters_[i].nbytes());
  }
  for (size_t u = 0; u < found.size(); ++u) {
    if (members[u].empty()) continue;
    if (auto made = std::dynamic_pointer_cast<UnitGather>(found[u]->sharding())) {
      units_.push_back(std::move(made));
      unit_modules_.push_back(found[u]);
      continue;
    }
    std::vector<torch::Tensor> parameters;
    std::vector<std::string> names;
    std::vector<int64_t> owners;
    for (const size_t i : members[u]) {
      parameters.push_back(parameters_[i]);
      names.push_back(names_[i]);
      owners.push_back(ownership_->owner(i));
    }
    auto& group = shard_group();
    units_.push_back(std::make_shared<UnitGather>(parameters, names, owners, group.world_size(), group.rank(), group));
    found[u]->shard_with(units_.back());
    unit_modules_.push_back(found[u]);
  }
  // Every parameter is whole after the broadcast: each rank frees the units' parameters it does not own.
  for (const auto& unit : units_) unit->release();
  // Gathers start ahead where collectives run apart from the training thread. Every rank must issue
  // the same collectives in the same order, so the ranks vote: one that can overlap decides for all
  // (elsewhere a gather started early costs memory, not order).
  unit_order_.reset();
  if (!units_.empty() && (forward_prefetch_ || backward_prefetch_ != "NONE")) {
    auto votes = torch::tensor({shard_group().all_reduce_overlaps(torch::TensorOptions().device(device_)) ? 1L : 0L});
    {
      const CollectiveName name("unit prefetch");
      collectives_->all_reduce(votes, Reduce::max).wait();
    }
    if (votes.item<int64_t>() != 0) unit_order_ = std::make_shared<UnitOrder>(forward_prefetch_, backward_prefetch_);
  }
  for (const auto& unit : units_) unit->prefetch_with(unit_order_);
  if (rank_ != 0) return;
  if (units_.empty()) {
    console().warn(
        "fsdp: {} divides the parameters of the module's arc::ShardedUnit submodules, and this module has "
        "none, so its parameters stay whole on every rank, as under SHARD_GRAD_OP; wrap its blocks in "
        "arc::ShardedUnit",
        sharding_);
  } else {
    console().info("fsdp: {} over {} units holding {} of the module's {} parameter bytes{}", sharding_, units_.size(),
                   unit_bytes, all_bytes, unit_order_ ? "; gathers start ahead" : "");
  }
}

// Every rank tears down alike: the parameters of the units made whole are gathered, and those are
// whole again (for use after fit, and for the next stage, which shards them anew); units that
// build_model sharded stay sharded, as no rank could hold the whole model.
void DDPStrategy::teardown() {
  if (units_.empty()) return;
  std::vector<std::shared_ptr<UnitGather>> kept;
  std::vector<std::weak_ptr<ShardedUnitBase>> kept_modules;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (std::find(built_.begin(), built_.end(), units_[u]) != built_.end()) {
      units_[u]->release();
      kept.push_back(units_[u]);
      kept_modules.push_back(unit_modules_[u]);
      continue;
    }
    units_[u]->gather();
    // A module that is gone (a Fabric outliving its model) has no units to detach.
    if (const auto alive = unit_modules_[u].lock()) alive->shard_with(nullptr);
  }
  for (const auto& unit : kept) unit->prefetch_with(nullptr);
  unit_order_.reset();
  units_ = std::move(kept);
  unit_modules_ = std::move(kept_modules);
  unit_parameters_.clear();
  reducers_.clear();
  reducing_ = nullptr;
  reduced_module_ = nullptr;
}

void DDPStrategy::with_whole_parameters(const std::function<void()>& fn) {
  std::vector<UnitGather*> gathered;
  for (const auto& unit : units_)
    if (!unit->gathered()) {
      unit->gather();
      gathered.push_back(unit.get());
    }
  const auto release = [&gathered] {
    for (auto* unit : gathered) unit->release();
  };
  try {
    fn();
  } catch (...) {
    release();
    throw;
  }
  release();
}

GradientReduction* DDPStrategy::reducer() {
  const auto same = [this](const std::vector<bool>& trainable) {
    for (size_t i = 0; i < parameters_.size(); ++i)
      if (parameters_[i].requires_grad() != trainable[i]) return false;
    return true;
  };
  if (!reducers_.empty() && same(reducers_.front().trainable)) return reducers_.front().reducer.get();
  if (reducers_.size() > 1 && same(reducers_.back().trainable)) {
    std::swap(reducers_.front(), reducers_.back());
    return reducers_.front().reducer.get();
  }
  std::vector<bool> trainable;
  std::vector<torch::Tensor> parameters;
  std::vector<std::string> names;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    trainable.push_back(parameters_[i].requires_grad());
    if (!trainable.back()) continue;
    parameters.push_back(parameters_[i]);
    names.push_back(names_[i]);
  }
  check_ranks_train_alike(trainable);
  if (!reducers_.empty())
    console().info("{}: {} of the module's {} parameter tensors require gradients now; their buckets are rebuilt",
                   name(), parameters.size(), parameters_.size());
  if (reducers_.size() > 1) reducers_.pop_back();
  auto made = make_reducer(std::move(parameters), std::move(names));
  made.trainable = std::move(trainable);
  reducers_.insert(reducers_.begin(), std::move(made));
  return reducers_.front().reducer.get();
}

DDPStrategy::Reducer DDPStrategy::make_reducer(std::vector<torch::Tensor> parameters,
                                               std::vector<std::string> names) const {
  Reducer made;
  if (parameters.empty()) return made;
  if (sharding_ == "NO_SHARD") {
    made.reducer = std::make_unique<GradReducer>(parameters, names, *collectives_, reducer_options_);
    return made;
  }
  // SHARD_GRAD_OP's and FULL_SHARD's first unit carries the skip vote in every share. Owners stay
  // those of setup. Small units stay in shared memory, all-reduced in place, except under
  // HYBRID_SHARD, whose gradients are reduced over every rank and parameters shared within the node.
  const bool scatter = sharding_ != "SHARD_OPTIMIZER";
  auto& group = shard_group();
  std::vector<int64_t> owners;
  for (const auto& parameter : parameters) owners.push_back(*owner_of(parameter));
  made.layout =
      std::make_shared<ShardLayout>(parameters, group.world_size(), group.rank(), reducer_options_.first_bucket_bytes(),
                                    reducer_options_.bucket_bytes(), scatter ? 1 : 0, owners);
  if (!hybrid_) made.layout->keep_small_units(group);
  made.shared = made.layout;
  if (full_shard()) {
    // The units' parameters are gathered by their units; the others go to every rank after a step.
    std::vector<torch::Tensor> outside;
    std::vector<int64_t> outside_owners;
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (unit_parameters_.count(parameters[i].unsafeGetTensorImpl()) != 0) continue;
      outside.push_back(parameters[i]);
      outside_owners.push_back(owners[i]);
    }
    made.shared.reset();
    if (!outside.empty()) {
      made.shared = std::make_shared<ShardLayout>(outside, group.world_size(), group.rank(),
                                                  reducer_options_.first_bucket_bytes(),
                                                  reducer_options_.bucket_bytes(), 0, outside_owners);
      if (!hybrid_) made.shared->keep_small_units(group);
    }
  }
  if (scatter) {
    made.reducer = std::make_unique<ShardedGradReducer>(made.layout, names, group, reducer_options_);
  } else {
    // SHARD_OPTIMIZER is for memory: buckets of the rank's own, which map none of the others'.
    auto options = reducer_options_;
    made.reducer = std::make_unique<GradReducer>(parameters, names, *collectives_, options.shared_buckets(false));
  }
  return made;
}

void DDPStrategy::check_ranks_train_alike(const std::vector<bool>& trainable) {
  // The count and a hash of which parameters; one small gather, only when the set changes.
  int64_t count = 0;
  uint64_t hash = 1469598103934665603ULL;
  for (size_t i = 0; i < trainable.size(); ++i) {
    if (!trainable[i]) continue;
    ++count;
    hash = (hash ^ i) * 1099511628211ULL;
  }
  const CollectiveName name("trainable parameters");
  const auto gathered = collectives_->all_gather(torch::tensor({count, static_cast<int64_t>(hash)}));
  std::string ranks;
  bool alike = true, same_counts = true;
  for (size_t r = 0; r < gathered.size(); ++r) {
    alike = alike && gathered[r][1].item<int64_t>() == static_cast<int64_t>(hash);
    same_counts = same_counts && gathered[r][0].item<int64_t>() == count;
    ranks += fmt::format("{}rank {} {}", r == 0 ? "" : ", ", r, gathered[r][0].item<int64_t>());
  }
  ARC_CHECK(alike, "the ranks train different parameters (parameter tensors that require gradients of the module's ",
            trainable.size(), ": ", ranks, same_counts ? ", but not the same ones" : "",
            "); every rank must freeze and unfreeze the same ones at the same step, as a callback's or the ",
            "module's hooks do when no rank test decides it");
}

void DDPStrategy::backward(const torch::Tensor& loss) {
  reducing_ = sync_ ? reducer() : nullptr;
  if (reducing_ != nullptr) reducing_->prepare_for_backward(profiler());
  if (unit_order_) unit_order_->release_unused();
  loss.backward();
}

// The vote travels in the gradient all-reduce: a rank that skipped joins it without a backward.
bool DDPStrategy::agree_on_skip(bool skipped) {
  ARC_CHECK(!skipped || units_.empty(), "this rank's training_step returned no loss, but under FULL_SHARD the other ",
            "ranks' backward gathers parameters that a rank without a backward cannot send; return a loss on every ",
            "rank (multiply it by 0 to skip its effect), or use sharding_strategy \"SHARD_GRAD_OP\"");
  // A rank that skipped joins with the reducer that the others' backward chose.
  if (skipped) reducing_ = reducer();
  if (reducing_ == nullptr) return skipped;
  if (skipped) reducing_->reduce_without_backward(profiler());
  return reducing_->skip_voted();
}

const ShardLayout* DDPStrategy::shard_layout() const {
  return reducers_.empty() ? nullptr : reducers_.front().layout.get();
}

std::optional<int64_t> DDPStrategy::owner_of(const torch::Tensor& parameter) const {
  if (!ownership_) return std::nullopt;
  const auto index = ownership_->index_of(parameter);
  if (!index) return std::nullopt;
  return ownership_->owner(*index);
}

namespace {

// Whether `optimizer` steps each parameter on its own and passes over those without gradient, as
// sharding needs: a rank steps the parameters it owns, the others have no gradient there.
void check_shardable(const torch::optim::Optimizer& optimizer) {
  using namespace torch::optim;
  const bool elementwise =
      dynamic_cast<const SGD*>(&optimizer) != nullptr || dynamic_cast<const Adam*>(&optimizer) != nullptr ||
      dynamic_cast<const AdamW*>(&optimizer) != nullptr || dynamic_cast<const RMSprop*>(&optimizer) != nullptr ||
      dynamic_cast<const Adagrad*>(&optimizer) != nullptr;
  ARC_CHECK(elementwise, "strategy fsdp steps each parameter on the rank that owns it, which SGD, Adam, AdamW, ",
            "RMSprop and Adagrad can do, but this optimizer is ",
            dynamic_cast<const LBFGS*>(&optimizer) != nullptr ? "LBFGS, whose line search needs every gradient"
                                                              : "another type",
            "; use one of those, or strategy \"ddp\" or \"ddp_spawn\"");
}

}  // namespace

// Each rank steps what it owns; SHARD_OPTIMIZER's ranks hold every averaged gradient, so those of
// other ranks' parameters are set aside for the step.
bool DDPStrategy::optimizer_step(torch::optim::Optimizer& optimizer, const std::function<bool()>& step) {
  const auto* layout = shard_layout();
  if (layout == nullptr) return step();
  check_shardable(optimizer);
  if (unit_order_) unit_order_->release_unused();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> set_aside;
  for (auto& group : optimizer.param_groups())
    for (auto& parameter : group.params()) {
      const auto owner = owner_of(parameter);
      if (!owner || *owner == owner_rank() || !parameter.grad().defined()) continue;
      set_aside.emplace_back(parameter, parameter.grad());
      parameter.mutable_grad() = torch::Tensor();
    }
  const bool stepped = step();
  for (auto& [parameter, grad] : set_aside) parameter.mutable_grad() = grad;
  if (const auto& shared = reducers_.front().shared) shared->share_parameters(shard_group());
  return stepped;
}

// As torch::nn::utils::clip_grad_norm_, with each gradient's norm taken by its owner: every rank
// stacks the same norms in the same order, so the total and the clipping are DDP's to the bit.
double DDPStrategy::clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  if (!ownership_) return Strategy::clip_grad_norm(parameters, max_norm);
  // Per parameter: whether it has a gradient, and its norm, from the rank that takes it (the owner;
  // rank 0 for a parameter outside the layout, whose gradient every rank has).
  auto found = torch::zeros({static_cast<int64_t>(parameters.size()) * 2}, torch::kDouble);
  auto* values = found.data_ptr<double>();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto& grad = parameters[i].grad();
    if (!grad.defined() || owner_of(parameters[i]).value_or(0) != owner_rank()) continue;
    values[2 * i] = 1;
    values[2 * i + 1] = grad.detach().norm(2).item<double>();
  }
  {
    const CollectiveName name("gradient norms");
    shard_group().all_reduce(found, Reduce::sum).wait();
  }
  std::vector<torch::Tensor> norms;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (values[2 * i] > 0)
      norms.push_back(torch::scalar_tensor(values[2 * i + 1], parameters[i].options().requires_grad(false)));
  if (norms.empty()) return 0.0;
  const auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  const auto coefficient = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (const auto& parameter : parameters)
    if (parameter.grad().defined()) parameter.grad().detach().mul_(coefficient);
  return total.item<double>();
}

std::vector<int64_t> DDPStrategy::state_owners(const torch::optim::Optimizer& optimizer) const {
  if (!ownership_) return {};
  std::vector<int64_t> owners;
  for (const auto& group : optimizer.param_groups())
    for (const auto& parameter : group.params()) owners.push_back(owner_of(parameter).value_or(-1));
  return owners;
}

}  // namespace arc
