// ShmCollectives: collectives run in order on one helper thread, so all-reduces started from
// autograd hooks return at once and overlap with the rest of backward. When every core already
// computes, the helper would only take turns with the computing thread, so they run on the
// caller's thread instead.
#include <arc/strategies/detail/shm_collectives.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/strategies/detail/shm_reduce.h>
#include <arc/strategies/detail/shm_segment.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace arc {
namespace {

// What a collective is, packed into 64 bits that the ranks compare at each step: its kind (4 bits),
// reduction or source rank (8), element type (8) and size in bytes (44).
enum class Kind : uint64_t { barrier = 1, all_reduce, broadcast, all_gather };

uint64_t doing(Kind kind, uint64_t detail, const torch::Tensor& tensor) {
  return static_cast<uint64_t>(kind) | detail << 4 | static_cast<uint64_t>(tensor.scalar_type()) << 12 |
         static_cast<uint64_t>(tensor.nbytes()) << 20;
}

// "all_reduce (sum) of 784 bytes of Float".
std::string describe(uint64_t doing) {
  static const char* kinds[] = {"?", "barrier", "all_reduce", "broadcast", "all_gather"};
  static const char* reductions[] = {"mean", "sum", "max", "min"};
  const auto kind = static_cast<Kind>(doing & 15);
  const uint64_t detail = (doing >> 4) & 255;
  const char* name = kinds[std::min<uint64_t>(doing & 15, 4)];
  if (kind == Kind::barrier || doing == 0) return name;
  const std::string what = kind == Kind::all_reduce  ? fmt::format(" ({})", reductions[std::min<uint64_t>(detail, 3)])
                           : kind == Kind::broadcast ? fmt::format(" (from local rank {})", detail)
                                                     : "";
  return fmt::format("{}{} of {} bytes of {}", name, what, doing >> 20,
                     c10::toString(static_cast<torch::ScalarType>((doing >> 12) & 255)));
}

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

/// Runs jobs one at a time, in submission order, on its own thread or (`threaded` false) at
/// once on the caller's; after a job fails, every later one fails with the same error (the group
/// is out of step).
class Worker {
 public:
  explicit Worker(bool threaded) {
    if (threaded) thread_ = std::thread([this] { run(); });
  }
  ~Worker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  std::shared_future<void> submit(std::function<void()> job) {
    std::packaged_task<void()> task([this, job = std::move(job)] {
      if (failed_) std::rethrow_exception(failed_);
      try {
        job();
      } catch (...) {
        failed_ = std::current_exception();
        throw;
      }
    });
    auto done = task.get_future().share();
    if (!thread_.joinable()) {
      task();
      return done;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(task));
    }
    ready_.notify_one();
    return done;
  }
  const std::atomic<bool>& stopping() const { return stopping_; }

 private:
  void run() {
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> jobs_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failed_;
  std::thread thread_;
};

class ShmCollectives : public Collectives {
 public:
  ShmCollectives(std::unique_ptr<ShmSegment> segment, std::unique_ptr<Collectives> global,
                 std::unique_ptr<Collectives> leaders, int64_t nodes, const ShmGroupOptions& options)
      : segment_(std::move(segment)),
        global_(std::move(global)),
        leaders_(std::move(leaders)),
        nodes_(nodes),
        timeout_(options.timeout),
        barrier_timeout_(options.barrier_timeout),
        worker_(options.helper_thread) {}

  int64_t rank() const override { return global_->rank(); }
  int64_t world_size() const override { return global_->world_size(); }
  std::string backend() const override {
    if (nodes_ == 1) return "shared memory";
    return "shared memory within each node, " + global_->backend() + " across " + std::to_string(nodes_) + " nodes";
  }

  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override {
    if (!tensor.device().is_cpu() || !shm_reducible(tensor.scalar_type())) return global_->all_reduce(tensor, op);
    auto done = worker_.submit([this, tensor, op]() mutable { all_reduce_now(tensor, op); });
    return PendingWork([done] { done.get(); });
  }

  void broadcast(torch::Tensor tensor, int64_t src) override {
    if (nodes_ > 1 || !tensor.device().is_cpu()) return global_->broadcast(tensor, src);
    worker_.submit([&] { broadcast_node(tensor, src); }).get();
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    if (nodes_ > 1 || !tensor.device().is_cpu()) return global_->all_gather(tensor);
    std::vector<torch::Tensor> gathered;
    worker_.submit([&] { gathered = all_gather_node(tensor); }).get();
    return gathered;
  }

  void barrier() override {
    if (nodes_ > 1) return global_->barrier();
    worker_
        .submit([this] {
          doing_ = static_cast<uint64_t>(Kind::barrier);
          step(barrier_timeout_, "timeout");
        })
        .get();
  }

 private:
  int64_t local_world() const { return segment_ ? segment_->local_world() : 1; }
  // Collectives alternate between the two sets of slots, so that a rank may fill one while a
  // slower one still reads the other; each use ends with every rank past a barrier, which is what
  // frees the set for the use after next.
  int64_t next_set() { return static_cast<int64_t>(sets_taken_++ % 2); }

  // A step of a collective waits up to collective_timeout; a barrier (set-up, saves) up to timeout.
  // Then every rank must be doing what this one does: collectives called in different orders
  // would pair up step by step and read each other's data.
  void step(std::chrono::milliseconds timeout, const char* option) {
    ++step_;
    segment_->arrive_and_wait(step_, timeout, worker_.stopping(), option, doing_);
    for (int64_t local = 0; local < local_world(); ++local) {
      const uint64_t theirs = segment_->doing_of(local, step_);
      ARC_CHECK(theirs == doing_, "the ranks called collectives in different orders: rank ", rank(), " is in ",
                describe(doing_), ", rank ", segment_->global_rank_of(local), " in ", describe(theirs),
                " (shared-memory step ", step_, "); every rank must call the same collectives in the same order ",
                "(a collective that some ranks skip, such as a value logged with sync_dist on one rank only or a ",
                "broadcast inside `if (rank == 0)`, pairs up with the next one of the others)");
    }
  }
  void step() { step(timeout_, "collective_timeout"); }

  // Calls fn(begin, count) over pieces of `tensor` of at most `piece_bytes` (and one slot).
  template <typename Fn>
  void in_pieces(const torch::Tensor& tensor, int64_t piece_bytes, Fn fn) {
    const int64_t per_piece = std::min(piece_bytes, segment_->slot_bytes()) / tensor.element_size();
    for (int64_t begin = 0; begin < tensor.numel(); begin += per_piece)
      fn(begin, std::min(per_piece, tensor.numel() - begin));
  }
  template <typename Fn>
  void in_pieces(const torch::Tensor& tensor, Fn fn) {
    in_pieces(tensor, segment_->slot_bytes(), fn);
  }

  void all_reduce_now(torch::Tensor& tensor, Reduce op) {
    doing_ = doing(Kind::all_reduce, static_cast<uint64_t>(op), tensor);
    auto work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    if (local_world() > 1) reduce_node(work, op);
    if (leaders_) leaders_->all_reduce(work, op).wait();
    if (nodes_ > 1 && local_world() > 1) broadcast_node(work, 0);
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  // Pieces of kPieceBytes, so that a piece's slots stay in cache between the copy in and the
  // reduction: every rank copies its piece into its slot; below kScatterBytes every rank then
  // reduces the whole piece (one barrier); above, each reduces its share of the piece into its own
  // slot and, after a second barrier, copies every share out (reduce-scatter, then all-gather). The
  // sources are combined in rank order either way, so every rank gets the same bits.
  static constexpr int64_t kPieceBytes = 256 << 10;
  static constexpr int64_t kScatterBytes = 16 << 10;

  void reduce_node(torch::Tensor& tensor, Reduce op) {
    auto* data = static_cast<std::byte*>(tensor.data_ptr());
    const auto element = static_cast<int64_t>(tensor.element_size());
    const int64_t me = segment_->local_index();
    const int64_t ranks = local_world();
    std::vector<const void*> sources(static_cast<size_t>(ranks));
    in_pieces(tensor, kPieceBytes, [&](int64_t begin, int64_t count) {
      const int64_t set = next_set();
      std::byte* piece = data + begin * element;
      std::memcpy(segment_->slot(set, me), piece, static_cast<size_t>(count * element));
      step();
      if (count * element < kScatterBytes) {
        for (int64_t s = 0; s < ranks; ++s) sources[static_cast<size_t>(s)] = segment_->slot(set, s);
        combine(tensor.scalar_type(), op, piece, sources, count);
        return;
      }
      // Share boundaries on 64-byte lines, so that no two ranks write one cache line.
      const int64_t line = std::max<int64_t>(1, 64 / element);
      const auto share_begin = [&](int64_t s) { return s == ranks ? count : (count * s / ranks) / line * line; };
      const int64_t first = share_begin(me);
      for (int64_t s = 0; s < ranks; ++s) sources[static_cast<size_t>(s)] = segment_->slot(set, s) + first * element;
      combine(tensor.scalar_type(), op, segment_->slot(set, me) + first * element, sources,
              share_begin(me + 1) - first);
      step();
      for (int64_t s = 0; s < ranks; ++s) {
        const int64_t from = share_begin(s);
        std::memcpy(piece + from * element, segment_->slot(set, s) + from * element,
                    static_cast<size_t>((share_begin(s + 1) - from) * element));
      }
    });
  }

  void broadcast_node(torch::Tensor& tensor, int64_t src) {
    doing_ = doing(Kind::broadcast, static_cast<uint64_t>(src), tensor);
    auto work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    auto* data = static_cast<std::byte*>(work.data_ptr());
    const auto element = static_cast<int64_t>(work.element_size());
    const bool sending = segment_->local_index() == src;
    in_pieces(work, [&](int64_t begin, int64_t count) {
      const int64_t set = next_set();
      const auto bytes = static_cast<size_t>(count * element);
      if (sending) std::memcpy(segment_->slot(set, src), data + begin * element, bytes);
      step();
      if (!sending) std::memcpy(data + begin * element, segment_->slot(set, src), bytes);
    });
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  std::vector<torch::Tensor> all_gather_node(const torch::Tensor& tensor) {
    doing_ = doing(Kind::all_gather, 0, tensor);
    const auto work = tensor.contiguous();
    std::vector<torch::Tensor> gathered;
    for (int64_t s = 0; s < local_world(); ++s) gathered.push_back(torch::empty_like(work));
    const auto* data = static_cast<const std::byte*>(work.data_ptr());
    const auto element = static_cast<int64_t>(work.element_size());
    in_pieces(work, [&](int64_t begin, int64_t count) {
      const int64_t set = next_set();
      const auto bytes = static_cast<size_t>(count * element);
      std::memcpy(segment_->slot(set, segment_->local_index()), data + begin * element, bytes);
      step();
      for (int64_t s = 0; s < local_world(); ++s)
        std::memcpy(static_cast<std::byte*>(gathered[static_cast<size_t>(s)].data_ptr()) + begin * element,
                    segment_->slot(set, s), bytes);
    });
    return gathered;
  }

  std::unique_ptr<ShmSegment> segment_;
  std::unique_ptr<Collectives> global_;
  std::unique_ptr<Collectives> leaders_;
  int64_t nodes_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds barrier_timeout_;
  uint32_t step_ = 0;
  uint32_t sets_taken_ = 0;
  // What the collective under way is (see doing()), which each step compares among the ranks.
  uint64_t doing_ = 0;
  // Last: joined before the segment it uses goes away.
  Worker worker_;
};

}  // namespace

std::unique_ptr<Collectives> make_shm_collectives(c10d::Store& store, const ShmGroupOptions& options,
                                                  std::unique_ptr<Collectives> global,
                                                  const GroupFactory& make_leaders) {
  store.set("node/" + std::to_string(options.rank), bytes_of(options.node));
  std::vector<int64_t> members;
  std::vector<int64_t> leaders;
  std::map<std::string, int64_t> size_of;
  for (int64_t r = 0; r < options.world_size; ++r) {
    const auto node = text_of(store.get("node/" + std::to_string(r)));
    if (size_of[node]++ == 0) leaders.push_back(r);
    if (node == options.node) members.push_back(r);
  }
  const auto nodes = static_cast<int64_t>(size_of.size());
  if (nodes == options.world_size) return global;
  const auto local_index = std::find(members.begin(), members.end(), options.rank) - members.begin();
  const auto local_world = static_cast<int64_t>(members.size());
  std::unique_ptr<ShmSegment> segment;
  const std::string name_key = "segment/" + std::to_string(members.front());
  if (local_world > 1 && local_index == 0) {
    ShmSegment::remove_stale();
    segment = ShmSegment::create(local_world, options.slot_bytes, options.rank);
    store.set(name_key, bytes_of(segment->name()));
    segment->unlink_when_attached(options.barrier_timeout);
  } else if (local_world > 1) {
    segment =
        ShmSegment::open(text_of(store.get(name_key)), local_world, options.slot_bytes, local_index, options.rank);
  }
  std::unique_ptr<Collectives> leader_group;
  const auto leader_index = std::find(leaders.begin(), leaders.end(), options.rank) - leaders.begin();
  if (nodes > 1 && local_index == 0) leader_group = make_leaders("leaders", leader_index, nodes);
  console().info("shared-memory collectives run on {}", options.helper_thread
                                                            ? "a helper thread, overlapping backward"
                                                            : "the training thread (no core is free for a helper)");
  return std::make_unique<ShmCollectives>(std::move(segment), std::move(global), std::move(leader_group), nodes,
                                          options);
}

}  // namespace arc
