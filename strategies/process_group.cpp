// Rendezvous and Gloo collectives on c10d.
#include <arc/strategies/process_group.h>

#include <arc/core/error.h>
#include <arc/strategies/shm_collectives.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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
    return c10::make_intrusive<c10d::TCPStore>(o.address, options);
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

class GlooCollectives : public Collectives {
 public:
  GlooCollectives(c10::intrusive_ptr<c10d::Store> store, const std::string& prefix, const RendezvousOptions& o)
      : store_(std::move(store)) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    check_in(*prefixed, o);
    auto options = ProcessGroupGloo::Options::create(o.timeout);
    const bool loopback = o.address.rfind("127.", 0) == 0 || o.address == "localhost";
    options->devices.push_back(loopback ? ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                        : ProcessGroupGloo::createDefaultDevice());
    options->threads = 2;
    group_ = c10::make_intrusive<ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix + "/gloo", store_),
                                                   static_cast<int>(o.rank), static_cast<int>(o.world_size), options);
  }

  int64_t rank() const override { return group_->getRank(); }
  int64_t world_size() const override { return group_->getSize(); }
  std::string backend() const override { return "gloo"; }

  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override {
    std::vector<torch::Tensor> tensors{std::move(tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    auto work = group_->allreduce(tensors, options);
    return PendingWork([work, tensors] { work->wait(); });
  }

  void broadcast(torch::Tensor tensor, int64_t src) override {
    std::vector<torch::Tensor> tensors{std::move(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = src;
    group_->broadcast(tensors, options)->wait();
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    std::vector<torch::Tensor> inputs{tensor.contiguous()};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int64_t r = 0; r < world_size(); ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
    group_->allgather(outputs, inputs)->wait();
    return outputs[0];
  }

  void barrier() override { group_->barrier()->wait(); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<ProcessGroupGloo> group_;
};

}  // namespace

void PendingWork::wait() {
  if (wait_) wait_();
}

StoreServer::StoreServer(const std::string& address, int64_t port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(address, options);
  } catch (const std::exception& error) {
    ARC_FAIL("cannot open the rendezvous store on ", address, ":", port, " (", error.what(), "); ",
             port == 0 ? "check the address" : "the port may be taken: choose another MASTER_PORT");
  }
}

StoreServer::~StoreServer() = default;

int64_t StoreServer::port() const { return store_->getPort(); }

c10::intrusive_ptr<c10d::TCPStore> StoreServer::store() const { return store_; }

std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options,
                                              c10::intrusive_ptr<c10d::TCPStore> hosted) {
  auto store = std::move(hosted);
  if (!store)
    store = options.rank == 0 && !options.store_hosted_elsewhere
                ? StoreServer(options.address, options.port, options.timeout).store()
                : connect(options);
  auto gloo = std::make_unique<GlooCollectives>(store, options.prefix, options);
  if (!options.shared_memory || options.world_size == 1) return gloo;
  ShmGroupOptions shm;
  shm.rank = options.rank;
  shm.world_size = options.world_size;
  shm.node = options.node;
  shm.timeout = options.timeout;
  shm.helper_thread = options.shm_helper_thread;
  const auto make_leaders = [&](const std::string& name, int64_t rank, int64_t size) {
    auto leaders = options;
    leaders.rank = rank;
    leaders.world_size = size;
    return std::make_unique<GlooCollectives>(store, options.prefix + "/" + name, leaders);
  };
  c10d::PrefixStore prefixed(options.prefix + "/shm", store);
  return make_shm_collectives(prefixed, shm, std::move(gloo), make_leaders);
}

std::unique_ptr<Collectives> make_collectives(const RendezvousOptions& options) {
  return make_collectives(options, {});
}

}  // namespace arc
