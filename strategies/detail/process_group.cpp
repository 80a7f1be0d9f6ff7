// Rendezvous, and Gloo and NCCL collectives on c10d. NCCL is compiled only with a CUDA build of
// LibTorch (ARC_WITH_NCCL).
#include <arc/strategies/detail/process_group.h>

#include <arc/base/detail/host.h>
#include <arc/base/detail/torch_compat.h>
#include <arc/base/error.h>
#include <arc/strategies/detail/collective_trace.h>
#include <arc/strategies/detail/shm_collectives.h>

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ARC_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstring>
#include <thread>

namespace arc {
namespace {

using c10d::ProcessGroupGloo;

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

c10d::ReduceOp to_c10d(Reduce op) {
  switch (op) {
    case Reduce::max:
      return c10d::ReduceOp::MAX;
    case Reduce::min:
      return c10d::ReduceOp::MIN;
    case Reduce::sum:
    case Reduce::mean:
      return c10d::ReduceOp::SUM;
  }
  return c10d::ReduceOp::SUM;
}

c10::intrusive_ptr<c10d::TCPStore> connect(const RendezvousOptions& o) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(o.port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = o.timeout;
  try {
    return compat::open_tcp_store(o.address, options);
  } catch (const std::exception& error) {
    ARC_FAIL("rank ", o.rank, " could not reach the rendezvous store at ", o.address, ":", o.port, " within ",
             seconds(o.timeout), " s (", error.what(), "); check that rank 0 is running and that MASTER_ADDR and ",
             "MASTER_PORT point at it");
  }
}

// Every rank sets its key, then waits until all keys exist; a timeout lists who is missing.
void check_in(c10d::Store& store, const RendezvousOptions& o) {
  store.set("arrived/" + std::to_string(o.rank), std::vector<uint8_t>{1});
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  while (true) {
    std::vector<int64_t> missing;
    for (int64_t r = 0; r < o.world_size; ++r)
      if (!store.check({"arrived/" + std::to_string(r)})) missing.push_back(r);
    if (missing.empty()) return;
    throw_peer_failure(o.peer_failure);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string ranks;
      for (const int64_t r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      ARC_FAIL("rank(s) ", ranks, " of ", o.world_size, " did not join the rendezvous at ", o.address, ":", o.port,
               " within ", seconds(o.timeout), " s; check that every process started (see the launcher's log) ",
               "and that WORLD_SIZE matches the number of processes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Collectives over one c10d process group; Gloo's and NCCL's take the same calls. Their waits end
// at collective_timeout (the group's option); a barrier waits in the store, up to timeout, so that
// a rank that writes a checkpoint may take longer than a step's collective may.
template <typename Group>
class C10dCollectives : public Collectives {
 public:
  C10dCollectives(c10::intrusive_ptr<c10d::Store> store, std::string prefix, c10::intrusive_ptr<Group> group,
                  std::string backend, const RendezvousOptions& o)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        group_(std::move(group)),
        backend_(std::move(backend)),
        timeout_(o.timeout),
        collective_timeout_(o.collective_timeout.value_or(o.timeout)),
        peer_failure_(o.peer_failure) {}

  int64_t rank() const override { return group_->getRank(); }
  int64_t world_size() const override { return group_->getSize(); }
  std::string backend() const override { return backend_; }

  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override {
    check_reduction(tensor, op);
    // One rank's sum, mean (x / 1 is exact), max and min are its tensor: nothing to exchange (a
    // one-rank Gloo all-reduce cost the MLP's DDP step 0.2 ms in its gradient buckets).
    if (world_size() == 1) return {};
    std::vector<torch::Tensor> tensors{writable(tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    auto work = group_->allreduce(tensors, options);
    return PendingWork([this, work, tensors, tensor, op]() mutable {
      wait(*work, "all_reduce");
      if (op == Reduce::mean) tensors[0].div_(static_cast<double>(world_size()));
      copy_back(tensors[0], tensor);
    });
  }

  PendingWork start_broadcast(torch::Tensor tensor, int64_t src) override {
    std::vector<torch::Tensor> tensors{writable(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = src;
    auto work = group_->broadcast(tensors, options);
    return PendingWork([this, work, tensors, tensor]() mutable {
      wait(*work, "broadcast");
      copy_back(tensors[0], tensor);
    });
  }

  // NCCL reduces and gathers flat buffers natively; LibTorch 1.13's Gloo has no such calls, and
  // Gloo's all-reduce (the default's) gives the bits its DDP gives.
  void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) override {
    if (backend_ != "nccl") return Collectives::reduce_scatter(output, input, op);
    check_shares(*this, output, input, "reduce_scatter");
    check_reduction(input, op);
    auto in = input;
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    wait(*group_->_reduce_scatter_base(output, in, options), "reduce_scatter");
    if (op == Reduce::mean) output.div_(static_cast<double>(world_size()));
  }

  // Gloo gathers into a tensor per rank, each copied into its place once the work is done.
  PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input) override {
    check_shares(*this, input, output, "all_gather_into");
    if (backend_ == "nccl") {
      auto work = group_->_allgather_base(output, input);
      return PendingWork([this, work, output, input] { wait(*work, "all_gather_into"); });
    }
    std::vector<torch::Tensor> inputs{writable(input.view(-1))};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    const c10::InferenceMode normal_tensors(false);
    for (int64_t r = 0; r < world_size(); ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
    auto work = group_->allgather(outputs, inputs);
    return PendingWork([this, work, inputs, outputs, output]() mutable {
      wait(*work, "all_gather_into");
      const c10::InferenceMode writable(output.is_inference());
      for (int64_t r = 0; r < world_size(); ++r)
        output.view(-1).narrow(0, r * inputs[0].numel(), inputs[0].numel()).copy_(outputs[0][static_cast<size_t>(r)]);
    });
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    std::vector<torch::Tensor> inputs{tensor.contiguous()};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    const c10::InferenceMode normal_tensors(false);
    for (int64_t r = 0; r < world_size(); ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
    wait(*group_->allgather(outputs, inputs), "all_gather");
    return outputs[0];
  }

  // Every rank adds itself to this barrier's count and waits until all have (up to timeout); then
  // the group's own barrier lines the ranks up to the microsecond, as the polling cannot.
  void barrier() override {
    const std::string key = prefix_ + "/barrier/" + std::to_string(++barriers_);
    store_->add(key, 1);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    auto pause = std::chrono::microseconds(50);
    for (int64_t arrived = 0; (arrived = store_->add(key, 0)) < world_size();) {
      ARC_CHECK(std::chrono::steady_clock::now() < deadline, "barrier ", barriers_, ": ", arrived, " of ", world_size(),
                " ranks arrived within the ", seconds(timeout_), " s timeout; the others may be ",
                "stuck or have failed (see their logs); raise timeout if they are only slow");
      throw_peer_failure(peer_failure_);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20'000));
    }
    wait(*group_->barrier(), "barrier");
  }

 private:
  // The group's threads run outside inference mode, where an inference tensor (made in an
  // evaluation step under inference_mode) may not be written: such a tensor goes through a normal
  // copy, written back on the calling thread (copy_back).
  static torch::Tensor writable(const torch::Tensor& tensor) {
    if (!tensor.is_inference()) return tensor;
    const c10::InferenceMode normal_tensors(false);
    return tensor.clone();
  }
  static void copy_back(const torch::Tensor& from, torch::Tensor& to) {
    if (from.is_same(to)) return;
    const c10::InferenceMode inference;
    to.copy_(from);
  }

  // Waits for `work`; a failure (Gloo's timeout among them) says which collective and what bounds it.
  template <typename Work>
  void wait(Work& work, const char* what) const {
    try {
      work.wait();
    } catch (const std::exception& error) {
      ARC_FAIL(backend_, " ", what, " on rank ", rank(), " failed: ", error.what(), ". A collective waits up to ",
               "collective_timeout (", seconds(collective_timeout_), " s) for the other ranks: one may be stuck, ",
               "failed, or calling collectives in another order; raise collective_timeout if its steps are only ",
               "that slow");
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  c10::intrusive_ptr<Group> group_;
  std::string backend_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds collective_timeout_;
  PeerFailure peer_failure_;
  int64_t barriers_ = 0;
};

std::unique_ptr<Collectives> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix,
                                       const RendezvousOptions& o) {
  check_in(*c10::make_intrusive<c10d::PrefixStore>(prefix, store), o);
  auto options = ProcessGroupGloo::Options::create(o.collective_timeout.value_or(o.timeout));
  const bool loopback = o.address.rfind("127.", 0) == 0 || o.address == "localhost";
  options->devices.push_back(loopback ? ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                      : ProcessGroupGloo::createDefaultDevice());
  options->threads = 2;
  auto group = c10::make_intrusive<ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix + "/gloo", store),
                                                     static_cast<int>(o.rank), static_cast<int>(o.world_size), options);
  return std::make_unique<C10dCollectives<ProcessGroupGloo>>(store, prefix, std::move(group), "gloo", o);
}

#ifdef ARC_WITH_NCCL
std::unique_ptr<Collectives> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix,
                                       const RendezvousOptions& o) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = o.collective_timeout.value_or(o.timeout);
  auto group =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(prefix + "/nccl", store),
                                                  static_cast<int>(o.rank), static_cast<int>(o.world_size), options);
  return std::make_unique<C10dCollectives<c10d::ProcessGroupNCCL>>(store, prefix, std::move(group), "nccl", o);
}

// CUDA tensors go through NCCL; CPU tensors (strings, signal votes) and barriers through Gloo.
class ByDevice : public Collectives {
 public:
  ByDevice(std::unique_ptr<Collectives> cpu, std::unique_ptr<Collectives> cuda)
      : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}
  int64_t rank() const override { return cpu_->rank(); }
  int64_t world_size() const override { return cpu_->world_size(); }
  std::string backend() const override { return cuda_->backend() + " (" + cpu_->backend() + " for CPU tensors)"; }
  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override { return of(tensor).all_reduce(tensor, op); }
  torch::Tensor reduce_buffer(int64_t numel, const torch::TensorOptions& options) override {
    return (options.device().is_cuda() ? *cuda_ : *cpu_).reduce_buffer(numel, options);
  }
  bool all_reduce_overlaps(const torch::TensorOptions& options) const override {
    return (options.device().is_cuda() ? *cuda_ : *cpu_).all_reduce_overlaps(options);
  }
  PendingWork start_broadcast(torch::Tensor tensor, int64_t src) override {
    return of(tensor).start_broadcast(tensor, src);
  }
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override { return of(tensor).all_gather(tensor); }
  void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) override {
    of(input).reduce_scatter(output, input, op);
  }
  PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input) override {
    return of(input).start_all_gather_into(output, input);
  }
  void barrier() override { cpu_->barrier(); }

 private:
  Collectives& of(const torch::Tensor& tensor) { return tensor.is_cuda() ? *cuda_ : *cpu_; }
  std::unique_ptr<Collectives> cpu_;
  std::unique_ptr<Collectives> cuda_;
};
#endif

}  // namespace

void PendingWork::wait() {
  if (wait_) wait_();
}

torch::Tensor Collectives::reduce_buffer(int64_t numel, const torch::TensorOptions& options) {
  return torch::zeros({numel}, options);
}

void Collectives::reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) {
  check_shares(*this, output, input, "reduce_scatter");
  check_reduction(input, op);
  auto reduced = input.clone();
  all_reduce(reduced, op).wait();
  const c10::InferenceMode writable(output.is_inference());
  output.view(-1).copy_(reduced.view(-1).narrow(0, rank() * output.numel(), output.numel()));
}

PendingWork Collectives::start_all_gather_into(torch::Tensor output, torch::Tensor input) {
  check_shares(*this, input, output, "all_gather_into");
  const auto gathered = all_gather(input.reshape(-1));
  const c10::InferenceMode writable(output.is_inference());
  for (int64_t r = 0; r < world_size(); ++r)  // each straight into its place: no concatenated copy
    output.view(-1).narrow(0, r * input.numel(), input.numel()).copy_(gathered[static_cast<size_t>(r)]);
  return {};
}

void check_shares(const Collectives& group, const torch::Tensor& share, const torch::Tensor& whole, const char* what) {
  ARC_CHECK(whole.numel() == share.numel() * group.world_size() && whole.scalar_type() == share.scalar_type() &&
                whole.device() == share.device(),
            what, ": the whole tensor must hold world_size (", group.world_size(), ") times the elements of a ",
            "rank's share, of the same type and device; got ", whole.numel(), " ", whole.scalar_type(), " on ",
            whole.device(), " and ", share.numel(), " ", share.scalar_type(), " on ", share.device());
  const auto& strided = share.is_contiguous() ? whole : share;
  ARC_CHECK(strided.is_contiguous(), what, ": both tensors must be contiguous, but the ",
            share.is_contiguous() ? "whole one" : "rank's share", " (sizes ", strided.sizes(), ", strides ",
            strided.strides(), ") is not; pass a .contiguous() copy, or flat buffers as sharded training keeps them");
}

void check_reduction(const torch::Tensor& tensor, Reduce op) {
  ARC_CHECK(op != Reduce::mean || tensor.is_floating_point(), "all_reduce: the mean of a ", tensor.scalar_type(),
            " tensor cannot be held in ", tensor.scalar_type(), "; convert it to a floating type first, or reduce ",
            "with sum and divide");
}

std::string broadcast_text(Collectives& group, const std::string& text, int64_t src) {
  auto length = torch::tensor({static_cast<int64_t>(text.size())});
  group.broadcast(length, src);
  auto bytes = torch::zeros({length.item<int64_t>()}, torch::kUInt8);
  // An empty tensor has no memory: its data pointer is null, which memcpy may not take even for 0 bytes.
  if (group.rank() == src && !text.empty()) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  group.broadcast(bytes, src);
  if (bytes.numel() == 0) return {};
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
}

std::vector<std::string> all_gather_text(Collectives& group, const std::string& text) {
  const auto lengths = group.all_gather(torch::tensor({static_cast<int64_t>(text.size())}));
  int64_t longest = 1;  // never an empty tensor, which not every backend gathers
  for (const auto& length : lengths) longest = std::max(longest, length.item<int64_t>());
  auto bytes = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  const auto gathered = group.all_gather(bytes);
  std::vector<std::string> out;
  for (size_t r = 0; r < gathered.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(gathered[r].data_ptr<uint8_t>()),
                     static_cast<size_t>(lengths[r].item<int64_t>()));
  return out;
}

StoreServer::StoreServer(const std::string& address, int64_t port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    store_ = compat::open_tcp_store(address, options);
  } catch (const std::exception& error) {
    ARC_FAIL("cannot open the rendezvous store on ", address, ":", port, " (", error.what(), "); ",
             port == 0 ? "check the address" : "the port may be taken: choose another MASTER_PORT");
  }
}

StoreServer::~StoreServer() = default;

int64_t StoreServer::port() const { return store_->getPort(); }

c10::intrusive_ptr<c10d::TCPStore> StoreServer::store() const { return store_; }

namespace {

std::unique_ptr<Collectives> make_untraced(const RendezvousOptions& options,
                                           const c10::intrusive_ptr<c10d::TCPStore>& store) {
  auto gloo = make_gloo(store, options.prefix, options);
#ifdef ARC_WITH_NCCL
  if (options.nccl) return std::make_unique<ByDevice>(std::move(gloo), make_nccl(store, options.prefix, options));
#endif
  if (!options.shared_memory || options.world_size == 1) return gloo;
  ShmGroupOptions shm;
  shm.rank = options.rank;
  shm.world_size = options.world_size;
  shm.node = options.node;
  shm.timeout = options.collective_timeout.value_or(options.timeout);
  shm.barrier_timeout = options.timeout;
  shm.helper_thread = options.shm_helper_thread;
  shm.spin = options.shm_spin;
  const auto make_leaders = [&](const std::string& name, int64_t rank, int64_t size) {
    auto leaders = options;
    leaders.rank = rank;
    leaders.world_size = size;
    return make_gloo(store, options.prefix + "/" + name, leaders);
  };
  c10d::PrefixStore prefixed(options.prefix + "/shm", store);
  return make_shm_collectives(prefixed, shm, std::move(gloo), make_leaders);
}

}  // namespace

void fit_shm_to_cores(RendezvousOptions& options, int64_t local_ranks, int64_t threads_per_rank, int64_t cores) {
  const int64_t threads = local_ranks * threads_per_rank;
  options.shm_helper_thread = threads + local_ranks <= cores;
  options.shm_spin.reset();
  if (threads <= cores) options.shm_spin = std::chrono::milliseconds(1);
}

namespace {

// The store (`hosted`, or one this rank hosts or joins), and the options with the prefix of this
// start's keys: a launcher's store outlives the workers it restarts, so each start of a rank gets the
// keys of its generation, the number of times this rank has joined the store. Agents that restart
// their workers together agree on it, and so does an agent that replaces a dead one (its restart
// count is 0 again).
std::pair<c10::intrusive_ptr<c10d::TCPStore>, RendezvousOptions> open_store(const RendezvousOptions& options,
                                                                            c10::intrusive_ptr<c10d::TCPStore> hosted) {
  auto store = std::move(hosted);
  if (!store)
    store = options.rank == 0 && !options.store_hosted_elsewhere
                ? StoreServer(options.address, options.port, options.timeout).store()
                : connect(options);
  auto group_options = options;
  if (options.store_hosted_elsewhere)
    group_options.prefix +=
        "/start_" + std::to_string(store->add(options.prefix + "/starts_of_rank_" + std::to_string(options.rank), 1));
  return {store, group_options};
}

std::unique_ptr<Collectives> traced(std::unique_ptr<Collectives> group, const c10::intrusive_ptr<c10d::TCPStore>& store,
                                    const RendezvousOptions& options) {
  if (group->world_size() == 1) return group;
  return std::make_unique<TracedCollectives>(std::move(group), store, options.prefix,
                                             options.collective_timeout.value_or(options.timeout),
                                             options.peer_failure);
}

// HYBRID_SHARD's group: the ranks of one node, whose reduce_scatter also sums each share across the
// nodes (among the ranks of the same local rank on every node); its other collectives stay within
// the node. A mean is summed within the node and across nodes, then divided, as the hierarchical
// all-reduce does, so that the shares are the all-reduce's to the bit (on two nodes, whose sum is
// one addition in any order).
class HybridCollectives : public Collectives {
 public:
  HybridCollectives(std::unique_ptr<Collectives> node, std::unique_ptr<Collectives> replicas)
      : node_(std::move(node)), replicas_(std::move(replicas)) {}
  int64_t rank() const override { return node_->rank(); }
  int64_t world_size() const override { return node_->world_size(); }
  std::string backend() const override {
    return node_->backend() + " within the node, " + replicas_->backend() + " across nodes";
  }
  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override { return node_->all_reduce(tensor, op); }
  bool all_reduce_overlaps(const torch::TensorOptions& options) const override {
    return node_->all_reduce_overlaps(options);
  }
  PendingWork start_broadcast(torch::Tensor tensor, int64_t src) override {
    return node_->start_broadcast(tensor, src);
  }
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override { return node_->all_gather(tensor); }
  void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) override {
    check_shares(*this, output, input, "reduce_scatter");
    check_reduction(input, op);
    const Reduce each = op == Reduce::mean ? Reduce::sum : op;
    node_->reduce_scatter(output, input, each);
    replicas_->all_reduce(output, each).wait();
    const c10::InferenceMode writable(output.is_inference());
    if (each != op) output.div_(static_cast<double>(world_size() * replicas_->world_size()));
  }
  PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input) override {
    return node_->start_all_gather_into(output, input);
  }
  void barrier() override { node_->barrier(); }
  double blocked_seconds() const override { return node_->blocked_seconds() + replicas_->blocked_seconds(); }

 private:
  std::unique_ptr<Collectives> node_;
  std::unique_ptr<Collectives> replicas_;
};

}  // namespace

std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options,
                                              c10::intrusive_ptr<c10d::TCPStore> hosted) {
  auto [store, group_options] = open_store(options, std::move(hosted));
  return traced(make_untraced(group_options, store), store, group_options);
}

HybridGroups make_hybrid_collectives(const RendezvousOptions& options, c10::intrusive_ptr<c10d::TCPStore> hosted,
                                     int64_t local_rank, int64_t local_world_size) {
  ARC_CHECK(local_world_size > 0 && options.world_size % local_world_size == 0 &&
                options.rank % local_world_size == local_rank,
            "HYBRID_SHARD shards within each node and needs the ranks numbered node by node, every node with ",
            local_world_size, " ranks, but rank ", options.rank, " of ", options.world_size, " is local rank ",
            local_rank, "; start the same number of ranks on every node, ranked by node (torchrun and srun's block ",
            "distribution do), or use sharding_strategy \"FULL_SHARD\"");
  auto [store, group_options] = open_store(options, std::move(hosted));
  HybridGroups groups;
  groups.world = traced(make_untraced(group_options, store), store, group_options);
  const int64_t node = options.rank / local_world_size;
  auto within = group_options;
  within.rank = local_rank;
  within.world_size = local_world_size;
  within.prefix += "/hybrid_node_" + std::to_string(node);
  auto across = group_options;
  across.rank = node;
  across.world_size = options.world_size / local_world_size;
  across.prefix += "/hybrid_replicas_" + std::to_string(local_rank);
  across.shared_memory = false;
  auto hybrid = std::make_unique<HybridCollectives>(make_untraced(within, store), make_untraced(across, store));
  within.prefix += "/trace";
  groups.shard = traced(std::move(hybrid), store, within);
  return groups;
}

std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options) {
  return make_collectives(options, {});
}

bool nccl_available() {
#ifdef ARC_WITH_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace arc
