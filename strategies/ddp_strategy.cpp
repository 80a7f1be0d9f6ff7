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
#include <thread>

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
  ARC_CHECK(!nccl || std::count(selected.begin(), selected.end(), device_) == 1, "devices lists ", device_.str(),
            " more than once, and NCCL cannot run two ranks on one GPU; list each GPU once, or set ",
            "process_group_backend to \"gloo\" to share it");
  plan.accelerator->setup_device(device_);
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
  collectives_ = make_collectives(rendezvous, hosted_store());
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
}

void DDPStrategy::setup_module(torch::nn::Module& module) {
  Strategy::setup_module(module);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> state;
  for (const auto& p : module.parameters()) state.push_back(p);
  for (const auto& b : module.buffers()) state.push_back(b);
  if (!state.empty()) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : state) flat.push_back(t.detach().reshape({-1}).to(torch::kDouble));
    auto packed = torch::cat(flat);
    const CollectiveName name("parameter broadcast");
    collectives_->broadcast(packed, 0);
    int64_t offset = 0;
    for (auto& t : state) {
      t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
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
  reducer();
}

GradReducer* DDPStrategy::reducer() {
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
  Reducer made;
  std::vector<torch::Tensor> parameters;
  std::vector<std::string> names;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    made.trainable.push_back(parameters_[i].requires_grad());
    if (!made.trainable.back()) continue;
    parameters.push_back(parameters_[i]);
    names.push_back(names_[i]);
  }
  check_ranks_train_alike(made.trainable);
  if (!reducers_.empty())
    console().info("{}: {} of the module's {} parameter tensors require gradients now; their buckets are rebuilt",
                   name(), parameters.size(), parameters_.size());
  if (reducers_.size() > 1) reducers_.pop_back();
  if (!parameters.empty())
    made.reducer = std::make_unique<GradReducer>(parameters, names, *collectives_, reducer_options_);
  reducers_.insert(reducers_.begin(), std::move(made));
  return reducers_.front().reducer.get();
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
  loss.backward();
}

// The vote travels in the gradient all-reduce: a rank that skipped joins it without a backward.
bool DDPStrategy::agree_on_skip(bool skipped) {
  // A rank that skipped joins with the reducer that the others' backward chose.
  if (skipped) reducing_ = reducer();
  if (reducing_ == nullptr) return skipped;
  if (skipped) reducing_->reduce_without_backward(profiler());
  return reducing_->skip_voted();
}

}  // namespace arc
