// ShmCollectives: collectives run in order on one helper thread, so all-reduces started from
// autograd hooks return at once and overlap with the rest of backward. When every core already
// computes, the helper would only take turns with the computing thread, so they run on the
// caller's thread instead. With a core to itself, the helper checks for work, and the training
// thread for its results, for up to the group's spin before sleeping (wake-ups at every hand-over
// cost DDP a quarter of its speed on a 16-core virtual machine).
#include <arc/strategies/detail/shm_collectives.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/strategies/detail/ordered_worker.h>
#include <arc/strategies/detail/shm_reduce.h>
#include <arc/strategies/detail/shm_segment.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstring>
#include <map>

namespace arc {
namespace {

// What a collective is, packed into 64 bits that the ranks compare at each step: its kind (4 bits),
// reduction or source rank (8), element type (8) and size in bytes (44).
enum class Kind : uint64_t {
  barrier = 1,
  all_reduce,
  broadcast,
  all_gather,
  all_reduce_in_place,
  share_buffer,
  reduce_scatter
};

uint64_t doing(Kind kind, uint64_t detail, torch::ScalarType type, int64_t bytes) {
  return static_cast<uint64_t>(kind) | detail << 4 | static_cast<uint64_t>(type) << 12 |
         static_cast<uint64_t>(bytes) << 20;
}
uint64_t doing(Kind kind, uint64_t detail, const torch::Tensor& tensor) {
  return doing(kind, detail, tensor.scalar_type(), static_cast<int64_t>(tensor.nbytes()));
}

// "all_reduce (sum) of 784 bytes of Float".
std::string describe(uint64_t doing) {
  static const char* kinds[] = {"?",
                                "barrier",
                                "all_reduce",
                                "broadcast",
                                "all_gather",
                                "all_reduce of a shared buffer",
                                "reduce_buffer",
                                "reduce_scatter"};
  static const char* reductions[] = {"mean", "sum", "max", "min"};
  const auto kind = static_cast<Kind>(doing & 15);
  const uint64_t detail = (doing >> 4) & 255;
  const char* name = kinds[std::min<uint64_t>(doing & 15, 7)];
  if (kind == Kind::barrier || doing == 0) return name;
  const bool reduces = kind == Kind::all_reduce || kind == Kind::all_reduce_in_place || kind == Kind::reduce_scatter;
  const std::string what = reduces                   ? fmt::format(" ({})", reductions[std::min<uint64_t>(detail, 3)])
                           : kind == Kind::broadcast ? fmt::format(" (from local rank {})", detail)
                                                     : "";
  return fmt::format("{}{} of {} bytes of {}", name, what, doing >> 20,
                     c10::toString(static_cast<torch::ScalarType>((doing >> 12) & 255)));
}

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

class ShmCollectives : public Collectives {
 public:
  /// `replicas`, where every node has as many ranks: this local rank's group on every node (its rank
  /// the node's index), and `by_local_rank` the ranks ordered by local rank, then node.
  ShmCollectives(std::unique_ptr<ShmSegment> segment, std::unique_ptr<Collectives> global,
                 std::unique_ptr<Collectives> leaders, std::unique_ptr<Collectives> replicas,
                 std::vector<int64_t> by_local_rank, int64_t nodes, const ShmGroupOptions& options)
      : segment_(std::move(segment)),
        global_(std::move(global)),
        leaders_(std::move(leaders)),
        replicas_(std::move(replicas)),
        by_local_rank_(torch::tensor(by_local_rank)),
        nodes_(nodes),
        timeout_(options.timeout),
        barrier_timeout_(options.barrier_timeout),
        worker_(options.helper_thread, options.spin.value_or(std::chrono::microseconds(0))) {}

  int64_t rank() const override { return global_->rank(); }
  int64_t world_size() const override { return global_->world_size(); }
  std::string backend() const override {
    if (nodes_ == 1) return "shared memory";
    return "shared memory within each node, " + global_->backend() + " across " + std::to_string(nodes_) + " nodes";
  }

  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override {
    if (!tensor.device().is_cpu() || !shm_reducible(tensor.scalar_type())) return global_->all_reduce(tensor, op);
    check_reduction(tensor, op);
    return submit([this, tensor, op]() mutable {
      if (const auto [file, region] = shared_buffer_of(tensor); file) return reduce_in_place(*file, region, tensor, op);
      all_reduce_now(tensor, op);
    });
  }

  torch::Tensor reduce_buffer(int64_t numel, const torch::TensorOptions& options) override {
    const auto type = c10::typeMetaToScalarType(options.dtype());
    if (nodes_ > 1 || !options.device().is_cpu() || !shm_reducible(type) || numel == 0)
      return Collectives::reduce_buffer(numel, options);
    torch::Tensor buffer;
    worker_.call([&] { buffer = share_buffer(numel, options); });
    return buffer;
  }

  bool all_reduce_overlaps(const torch::TensorOptions& options) const override {
    if (!options.device().is_cpu() || !shm_reducible(c10::typeMetaToScalarType(options.dtype())))
      return global_->all_reduce_overlaps(options);
    return worker_.threaded();
  }

  PendingWork start_broadcast(torch::Tensor tensor, int64_t src) override {
    if (nodes_ > 1 || !tensor.device().is_cpu()) return global_->start_broadcast(tensor, src);
    return submit([this, tensor, src]() mutable { broadcast_node(tensor, src); });
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    if (nodes_ > 1 || !tensor.device().is_cpu()) return global_->all_gather(tensor);
    std::vector<torch::Tensor> gathered;
    const auto work = tensor.contiguous();
    for (int64_t s = 0; s < local_world(); ++s) gathered.push_back(torch::empty_like(work));
    worker_.call([&] { all_gather_node(work, gathered); });
    return gathered;
  }

  // Across nodes of as many ranks each, hierarchically: the shares are ordered by local rank, then
  // node, and reduce-scattered within the node, so that each rank holds its node's sum of the shares
  // of its local rank on every node; those are reduce-scattered among the ranks of that local rank
  // (Gloo), and a mean is divided last, as the hierarchical all-reduce does (its bits on two nodes).
  // Across nodes of different sizes, through the all-reduce (the default); all-gathers through the
  // all-gather.
  void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) override {
    const bool hierarchical = nodes_ == 1 || replicas_;
    if (!hierarchical || !input.device().is_cpu() || !shm_reducible(input.scalar_type()))
      return Collectives::reduce_scatter(output, input, op);
    check_shares(*this, output, input, "reduce_scatter");
    check_reduction(input, op);
    if (nodes_ == 1) return worker_.call([&] { reduce_scatter_node(output, input, op); });
    const Reduce each = op == Reduce::mean ? Reduce::sum : op;
    const auto ordered = input.view({world_size(), -1}).index_select(0, by_local_rank_).view(-1);
    auto mine = torch::empty({output.numel() * nodes_}, output.options());
    worker_.call([&] { reduce_scatter_node(mine, ordered, each); });
    replicas_->reduce_scatter(output, mine, each);
    const c10::InferenceMode writable(output.is_inference());
    if (each != op) output.div_(static_cast<double>(world_size()));
  }

  PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input) override {
    if (nodes_ > 1 || !input.device().is_cpu()) return global_->start_all_gather_into(output, input);
    check_shares(*this, input, output, "all_gather_into");
    std::vector<torch::Tensor> shares;
    for (int64_t s = 0; s < local_world(); ++s)
      shares.push_back(output.view(-1).narrow(0, s * input.numel(), input.numel()));
    return submit([this, input, shares] { all_gather_node(input, shares); });
  }

  void barrier() override {
    if (nodes_ > 1) return global_->barrier();
    worker_.call([this] {
      doing_ = static_cast<uint64_t>(Kind::barrier);
      step(barrier_timeout_, "timeout");
    });
  }

 private:
  int64_t local_world() const { return segment_ ? segment_->local_world() : 1; }
  // Runs `job` on the worker after the collectives started before it.
  PendingWork submit(std::function<void()> job) {
    return PendingWork(
        [done = worker_.submit(std::move(job)), spin = worker_.spin()] { OrderedWorker::wait(done, spin); });
  }
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

  // Within one node a mean is divided in the reduction; across nodes the node sums are summed,
  // then divided.
  void all_reduce_now(torch::Tensor& tensor, Reduce op) {
    doing_ = doing(Kind::all_reduce, static_cast<uint64_t>(op), tensor);
    auto work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const Reduce node_op = nodes_ > 1 && op == Reduce::mean ? Reduce::sum : op;
    if (local_world() > 1) reduce_node(work, node_op);
    if (leaders_) leaders_->all_reduce(work, node_op).wait();
    if (nodes_ > 1 && local_world() > 1) broadcast_node(work, 0);
    const c10::InferenceMode writable(work.is_inference());
    if (node_op != op) work.div_(static_cast<double>(world_size()));
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  // Local rank 0 makes a file of one page-aligned region per rank and tells the others its name
  // through its slot; once all have mapped it, it is unlinked. Without room in /dev/shm the
  // buffer is an ordinary tensor, which all_reduce copies through the slots.
  torch::Tensor share_buffer(int64_t numel, const torch::TensorOptions& options) {
    const auto region = static_cast<int64_t>(page_aligned(static_cast<size_t>(numel) * options.dtype().itemsize()));
    const auto file_bytes = static_cast<size_t>(region * local_world());
    doing_ = doing(Kind::share_buffer, 0, c10::typeMetaToScalarType(options.dtype()), region);
    const int64_t set = next_set();
    auto* name = reinterpret_cast<char*>(segment_->slot(set, 0));
    std::shared_ptr<ShmFile> file;
    if (segment_->local_index() == 0) {
      try {
        file = ShmFile::create(file_bytes);
      } catch (const Error& error) {
        if (!warned_no_room_)
          console().warn(
              "buffers for repeated all-reduces (DDP's gradient buckets) stay in private memory, "
              "which the all-reduce copies through its slots: {}",
              error.what());
        warned_no_room_ = true;
      }
      std::snprintf(name, static_cast<size_t>(std::min<int64_t>(256, segment_->slot_bytes())), "%s",
                    file ? file->name().c_str() : "");
    }
    step();
    if (segment_->local_index() != 0 && name[0] != '\0') file = ShmFile::open(name, file_bytes);
    step();
    if (!file) return Collectives::reduce_buffer(numel, options);
    file->unlink();
    // Buffers whose tensors are gone are forgotten first, so that no two entries share an address.
    shared_.erase(std::remove_if(shared_.begin(), shared_.end(), [](const auto& b) { return b.file.expired(); }),
                  shared_.end());
    void* mine = file->data() + segment_->local_index() * region;
    shared_.push_back({file, mine, region, static_cast<size_t>(numel) * options.dtype().itemsize()});
    return torch::from_blob(
        mine, {numel}, [file](void*) {}, options);
  }

  struct SharedBuffer {
    std::weak_ptr<ShmFile> file;
    const void* mine;  // this rank's region
    int64_t region;
    size_t bytes;
  };

  // The file of the shared buffer that `tensor` is, whole, and its region size (no file: any other
  // tensor). Runs for every all-reduce: addresses are compared first.
  std::pair<std::shared_ptr<ShmFile>, int64_t> shared_buffer_of(const torch::Tensor& tensor) const {
    for (const auto& buffer : shared_)
      if (tensor.data_ptr() == buffer.mine && tensor.nbytes() == buffer.bytes && tensor.is_contiguous())
        return {buffer.file.lock(), buffer.region};
    return {};
  }

  // Every rank reduces its share straight from the others' buffers and writes the result into all
  // of them: two barriers, and no copy through the slots.
  void reduce_in_place(const ShmFile& file, int64_t bytes_per_rank, torch::Tensor& tensor, Reduce op) {
    doing_ = doing(Kind::all_reduce_in_place, static_cast<uint64_t>(op), tensor);
    const auto element = static_cast<int64_t>(tensor.element_size());
    const int64_t me = segment_->local_index();
    const auto region = [&](int64_t s, int64_t at) { return file.data() + s * bytes_per_rank + at * element; };
    std::vector<const void*> sources(static_cast<size_t>(local_world()));
    step();
    const auto [first, end] = share_of(me, tensor.numel(), element);
    for (int64_t begin = first; begin < end; begin += kPieceBytes / element) {
      const int64_t count = std::min(kPieceBytes / element, end - begin);
      for (int64_t s = 0; s < local_world(); ++s) sources[static_cast<size_t>(s)] = region(s, begin);
      combine(tensor.scalar_type(), op, region(me, begin), sources, count);
      for (int64_t s = 0; s < local_world(); ++s)
        if (s != me) std::memcpy(region(s, begin), region(me, begin), static_cast<size_t>(count * element));
    }
    step();
  }

  // Rank `s`'s share of `count` elements, its bounds on 64-byte lines so that no two ranks write
  // one cache line.
  std::pair<int64_t, int64_t> share_of(int64_t s, int64_t count, int64_t element) const {
    const int64_t line = std::max<int64_t>(1, 64 / element);
    const auto bound = [&](int64_t r) {
      return r == local_world() ? count : (count * r / local_world()) / line * line;
    };
    return {bound(s), bound(s + 1)};
  }

  // Pieces of kPieceBytes, so that a piece's slots stay in cache between the copy in and the
  // reduction. Below kScatterBytes every rank copies its piece into its slot and, after a barrier,
  // reduces the whole piece. Above, each rank reduces a share of the piece: it copies the others'
  // shares of its data into its slot, and after a barrier reduces its own share from its tensor and
  // their slots, then writes the result into its slot; after a second barrier it copies the others'
  // results out (reduce-scatter, then all-gather, each byte of the tensor read and written once).
  // The sources are combined in rank order either way, so every rank gets the same bits.
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
      std::byte* mine = segment_->slot(set, me);
      if (count * element < kScatterBytes) {
        std::memcpy(mine, piece, static_cast<size_t>(count * element));
        step();
        for (int64_t s = 0; s < ranks; ++s) sources[static_cast<size_t>(s)] = segment_->slot(set, s);
        combine(tensor.scalar_type(), op, piece, sources, count);
        return;
      }
      // Copies, for every rank but this one, its share between `from` (the tensor or a slot) and `to`.
      const auto others_shares = [&](std::byte* to, const auto& from) {
        for (int64_t s = 0; s < ranks; ++s) {
          if (s == me) continue;
          const auto [first, end] = share_of(s, count, element);
          std::memcpy(to + first * element, from(s) + first * element, static_cast<size_t>((end - first) * element));
        }
      };
      others_shares(mine, [&](int64_t) { return piece; });
      step();
      const auto [first, end] = share_of(me, count, element);
      for (int64_t s = 0; s < ranks; ++s)
        sources[static_cast<size_t>(s)] = (s == me ? piece : segment_->slot(set, s)) + first * element;
      combine(tensor.scalar_type(), op, piece + first * element, sources, end - first);
      std::memcpy(mine + first * element, piece + first * element, static_cast<size_t>((end - first) * element));
      step();
      others_shares(piece, [&](int64_t s) { return segment_->slot(set, s); });
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

  // `work` (contiguous) of every rank into `gathered` (contiguous, one per rank, of its size).
  void all_gather_node(const torch::Tensor& work, const std::vector<torch::Tensor>& gathered) {
    doing_ = doing(Kind::all_gather, 0, work);
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
  }

  // Piece by piece (of a whole slot: each rank reads only its share of the others' slots, so a
  // piece's barrier is worth more than cache locality), every rank puts its input into its slot;
  // after a barrier each rank combines, in rank order as all_reduce does (so to its bits), the part
  // of the piece that is its share.
  void reduce_scatter_node(torch::Tensor& output, const torch::Tensor& input, Reduce op) {
    doing_ = doing(Kind::reduce_scatter, static_cast<uint64_t>(op), input);
    const auto* data = static_cast<const std::byte*>(input.data_ptr());
    auto* out = static_cast<std::byte*>(output.data_ptr());
    const auto element = static_cast<int64_t>(input.element_size());
    const int64_t me = segment_->local_index(), share = output.numel();
    std::vector<const void*> sources(static_cast<size_t>(local_world()));
    in_pieces(input, [&](int64_t begin, int64_t count) {
      const int64_t set = next_set();
      std::memcpy(segment_->slot(set, me), data + begin * element, static_cast<size_t>(count * element));
      step();
      const int64_t first = std::max(begin, me * share), end = std::min(begin + count, (me + 1) * share);
      if (first >= end) return;
      for (int64_t s = 0; s < local_world(); ++s)
        sources[static_cast<size_t>(s)] = segment_->slot(set, s) + (first - begin) * element;
      combine(input.scalar_type(), op, out + (first - me * share) * element, sources, end - first);
    });
  }

  std::unique_ptr<ShmSegment> segment_;
  std::unique_ptr<Collectives> global_;
  std::unique_ptr<Collectives> leaders_;
  std::unique_ptr<Collectives> replicas_;
  torch::Tensor by_local_rank_;
  int64_t nodes_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds barrier_timeout_;
  uint32_t step_ = 0;
  uint32_t sets_taken_ = 0;
  // What the collective under way is (see doing()), which each step compares among the ranks.
  uint64_t doing_ = 0;
  // The buffers handed out by reduce_buffer that still exist (their tensors own the files).
  std::vector<SharedBuffer> shared_;
  bool warned_no_room_ = false;
  // Last: joined before the segment it uses goes away.
  OrderedWorker worker_;
};

}  // namespace

std::unique_ptr<Collectives> make_shm_collectives(c10d::Store& store, const ShmGroupOptions& options,
                                                  std::unique_ptr<Collectives> global,
                                                  const GroupFactory& make_leaders) {
  store.set("node/" + std::to_string(options.rank), bytes_of(options.node));
  std::vector<int64_t> members;
  std::vector<int64_t> leaders;
  std::map<std::string, std::vector<int64_t>> ranks_of;
  std::vector<std::string> node_names;
  for (int64_t r = 0; r < options.world_size; ++r) {
    const auto node = text_of(store.get("node/" + std::to_string(r)));
    auto& ranks = ranks_of[node];
    if (ranks.empty()) leaders.push_back(r), node_names.push_back(node);
    ranks.push_back(r);
    if (node == options.node) members.push_back(r);
  }
  const auto nodes = static_cast<int64_t>(ranks_of.size());
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
  if (segment && options.spin) segment->spin_before_sleeping(*options.spin);
  std::unique_ptr<Collectives> leader_group;
  const auto leader_index = std::find(leaders.begin(), leaders.end(), options.rank) - leaders.begin();
  if (nodes > 1 && local_index == 0) leader_group = make_leaders("leaders", leader_index, nodes);
  // Where every node has as many ranks, each local rank's group on every node, and the ranks in
  // order of local rank, then node: the hierarchical reduce-scatter's.
  std::unique_ptr<Collectives> replicas;
  std::vector<int64_t> by_local_rank;
  const bool even = std::all_of(ranks_of.begin(), ranks_of.end(),
                                [&](const auto& node) { return node.second.size() == members.size(); });
  if (nodes > 1 && even) {
    const auto node_index = std::find(node_names.begin(), node_names.end(), options.node) - node_names.begin();
    replicas = make_leaders("replicas_" + std::to_string(local_index), node_index, nodes);
    for (size_t l = 0; l < members.size(); ++l)
      for (const auto& name : node_names) by_local_rank.push_back(ranks_of[name][l]);
  }
  const std::string waits =
      segment ? fmt::format("; a rank waits {:g} ms for the others before it sleeps",
                            std::chrono::duration<double, std::milli>(segment->spin_before_sleeping()).count())
              : "";
  console().info("shared-memory collectives run on {}{}",
                 options.helper_thread ? "a helper thread, overlapping backward"
                                       : "the training thread (no core is free for a helper)",
                 waits);
  return std::make_unique<ShmCollectives>(std::move(segment), std::move(global), std::move(leader_group),
                                          std::move(replicas), std::move(by_local_rank), nodes, options);
}

}  // namespace arc
