// ShardLayout and ShardedGradReducer.
#include <arc/strategies/sharded_reducer.h>

#include <arc/base/error.h>
#include <arc/profilers/profiler.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

namespace arc {

ShardLayout::ShardLayout(const std::vector<torch::Tensor>& parameters, int64_t world_size, int64_t rank,
                         int64_t first_unit_bytes, int64_t unit_bytes, int64_t extra,
                         const std::vector<int64_t>& owners)
    : parameters_(parameters),
      world_size_(world_size),
      rank_(rank),
      owner_(parameters.size()),
      unit_of_(parameters.size()),
      offset_(parameters.size()),
      owned_numel_(static_cast<size_t>(world_size), 0) {
  for (size_t i = 0; i < parameters_.size(); ++i) index_[parameters_[i].unsafeGetTensorImpl()] = i;
  const auto bytes_of = [&](size_t p) {
    return parameters_[p].numel() * static_cast<int64_t>(parameters_[p].element_size());
  };
  // Owners: largest first (among equals, the later registered first), each to the rank that owns
  // the fewest bytes so far.
  if (!owners.empty()) {
    owner_ = owners;
  } else {
    std::vector<size_t> by_size;
    for (size_t i = parameters_.size(); i-- > 0;) by_size.push_back(i);
    std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) { return bytes_of(a) > bytes_of(b); });
    std::vector<int64_t> loads(static_cast<size_t>(world_size), 0);
    for (const size_t p : by_size) {
      const auto least = std::min_element(loads.begin(), loads.end());
      owner_[p] = least - loads.begin();
      *least += bytes_of(p);
    }
  }
  // Units, in reverse registration order and of one type each: a unit ends once every rank owns at
  // least 1/world_size of its size in it (shares of nearly one length, so little padding), or, where
  // the owners do not take turns, once it holds its size and 4 parameters per rank.
  int64_t cap = first_unit_bytes, bytes = 0;
  std::vector<int64_t> owned_bytes(static_cast<size_t>(world_size), 0);
  bool open = false;
  for (size_t i = parameters_.size(); i-- > 0;) {
    if (open && parameters_[units_.back().parameters.front()].scalar_type() != parameters_[i].scalar_type())
      open = false;
    if (!open) {
      if (!units_.empty()) cap = unit_bytes;
      units_.emplace_back();
      bytes = 0;
      std::fill(owned_bytes.begin(), owned_bytes.end(), 0);
      open = true;
    }
    units_.back().parameters.push_back(i);
    bytes += bytes_of(i);
    owned_bytes[static_cast<size_t>(owner_[i])] += bytes_of(i);
    const bool even = *std::min_element(owned_bytes.begin(), owned_bytes.end()) * world_size >= cap;
    const bool long_enough = static_cast<int64_t>(units_.back().parameters.size()) >= 4 * world_size && bytes >= cap;
    if (even || long_enough) open = false;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    unit.owned.assign(static_cast<size_t>(world_size), 0);
    for (const size_t p : unit.parameters) {
      auto& filled = unit.owned[static_cast<size_t>(owner_[p])];
      unit_of_[p] = u;
      offset_[p] = filled;
      filled += parameters_[p].numel();
      owned_numel_[static_cast<size_t>(owner_[p])] += parameters_[p].numel();
    }
    unit.share = *std::max_element(unit.owned.begin(), unit.owned.end()) + (u == 0 ? extra : 0);
  }
}

std::optional<size_t> ShardLayout::index_of(const torch::Tensor& parameter) const {
  const auto found = index_.find(parameter.unsafeGetTensorImpl());
  if (found == index_.end()) return std::nullopt;
  return found->second;
}

torch::Tensor ShardLayout::place(size_t p, const torch::Tensor& whole) const {
  const int64_t start = owner_[p] * units_[unit_of_[p]].share + offset_[p];
  return whole.narrow(0, start, parameters_[p].numel()).view(parameters_[p].sizes());
}

void ShardLayout::keep_small_units(Collectives& group) {
  constexpr int64_t kKeptUnitBytes = 4 << 20, kKeptBytes = 16 << 20;
  int64_t kept = 0;
  kept_.assign(units_.size(), torch::Tensor());
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto options = parameters_[units_[u].parameters.front()].options().requires_grad(false);
    const int64_t numel = units_[u].share * world_size_;
    const int64_t bytes = numel * static_cast<int64_t>(options.dtype().itemsize());
    if (bytes > kKeptUnitBytes || kept + bytes > kKeptBytes) continue;
    kept_[u] = group.reduce_buffer(numel, options);
    kept += bytes;
  }
}

torch::Tensor ShardLayout::kept(size_t u) const { return u < kept_.size() ? kept_[u] : torch::Tensor(); }

namespace {

// Waits for every work, even after one failed, then throws the first failure: no collective is left
// writing into memory that the caller frees on the error.
PendingWork all_of(std::vector<PendingWork> works) {
  return PendingWork([works = std::move(works)]() mutable {
    std::exception_ptr failure;
    for (auto& work : works) {
      try {
        work.wait();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  });
}

// Waits for every work after a failure that the caller reports: theirs would only repeat it.
void drain(std::vector<PendingWork> works) {
  try {
    all_of(std::move(works)).wait();
  } catch (const std::exception&) {
  }
}

}  // namespace

void ShardLayout::share_parameters(Collectives& group) const {
  for (size_t u = 0; u < units_.size(); ++u) start_sharing(u, group).wait();
}

// A kept unit by one all-reduce in place; another whose gathered layout takes at most 4 MiB in one
// all_gather_into (one collective); a larger one from each owner in turn, a tensor of 1 MiB or more
// broadcast in place and the smaller ones packed into one broadcast, so that no buffer of the unit's
// gathered size is needed. The values of other ranks are copied out when the work is waited for.
PendingWork ShardLayout::start_sharing(size_t u, Collectives& group) const {
  if (world_size_ == 1) return {};
  constexpr int64_t kGatheredBytes = 4 << 20, kInPlaceBytes = 1 << 20;
  torch::NoGradGuard no_grad;
  const auto& unit = units_[u];
  const CollectiveName name("parameter unit", static_cast<int64_t>(u));
  const auto options = parameters_[unit.parameters.front()].options().requires_grad(false);
  // Copies the values of the unit's parameters that other ranks own out of `whole` once `work` is done.
  const auto copied_out = [this, u](PendingWork work, torch::Tensor whole) {
    return PendingWork([this, u, work, whole]() mutable {
      work.wait();
      torch::NoGradGuard no_grad;
      for (const size_t p : units_[u].parameters)
        if (!owns(p)) parameters_[p].variable_data().copy_(place(p, whole));
    });
  };
  if (const auto whole = kept(u); whole.defined()) {
    // Each rank's values where it owns, -0.0 elsewhere: a sum in any order gives every value
    // exactly (x + -0.0 is x, -0.0 and +0.0 included), in place.
    whole.fill_(-0.0);
    for (const size_t p : unit.parameters)
      if (owns(p)) place(p, whole).copy_(parameters_[p].detach());
    return copied_out(group.all_reduce(whole, Reduce::sum), whole);
  }
  if (unit.share * world_size_ * static_cast<int64_t>(options.dtype().itemsize()) <= kGatheredBytes) {
    auto share = torch::zeros({unit.share}, options);
    for (const size_t p : unit.parameters)
      if (owns(p)) share.narrow(0, offset_[p], parameters_[p].numel()).copy_(parameters_[p].detach().reshape({-1}));
    auto whole = torch::empty({unit.share * world_size_}, options);
    return copied_out(group.start_all_gather_into(whole, share), whole);
  }
  std::vector<PendingWork> works;
  std::vector<std::pair<torch::Tensor, std::vector<torch::Tensor>>> unpacked;  // a buffer, what it fills
  // From each owner in turn: its large tensors in place, the others packed into one buffer.
  const auto start_broadcasts = [&] {
    for (int64_t r = 0; r < world_size_; ++r) {
      std::vector<torch::Tensor> packed;
      int64_t numel = 0;
      for (const size_t p : unit.parameters) {
        if (owner_[p] != r) continue;
        const auto& parameter = parameters_[p];
        if (parameter.is_contiguous() && static_cast<int64_t>(parameter.nbytes()) >= kInPlaceBytes) {
          works.push_back(group.start_broadcast(parameter.variable_data(), r));
        } else {
          packed.push_back(parameter.variable_data());
          numel += parameter.numel();
        }
      }
      if (packed.empty()) continue;
      auto buffer = torch::empty({numel}, options);
      int64_t offset = 0;
      if (r == rank_)
        for (const auto& t : packed) buffer.narrow(0, offset, t.numel()).copy_(t.reshape({-1})), offset += t.numel();
      works.push_back(group.start_broadcast(buffer, r));
      if (r != rank_) unpacked.emplace_back(buffer, std::move(packed));
    }
  };
  try {
    start_broadcasts();
  } catch (...) {
    drain(std::move(works));
    throw;
  }
  auto all = all_of(std::move(works));
  return PendingWork([all, unpacked]() mutable {
    all.wait();
    torch::NoGradGuard no_grad;
    for (auto& [buffer, packed] : unpacked) {
      int64_t offset = 0;
      for (auto& t : packed) t.copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes())), offset += t.numel();
    }
  });
}

ShardedGradReducer::ShardedGradReducer(std::shared_ptr<const ShardLayout> layout, std::vector<std::string> names,
                                       Collectives& collectives, ReducerOptions options)
    : layout_(std::move(layout)),
      names_(std::move(names)),
      collectives_(collectives),
      options_(options),
      wholes_(layout_->units().size()),
      pending_(layout_->units().size()),
      ready_(layout_->parameters().size(), false) {
  for (size_t u = 0; u < layout_->units().size(); ++u) {
    const auto& unit = layout_->units()[u];
    const auto options = layout_->parameters()[unit.parameters.front()].options().requires_grad(false);
    shares_.push_back(torch::zeros({unit.owned[static_cast<size_t>(layout_->rank())]}, options));
    wholes_[u] = layout_->kept(u);
  }
  accumulators_ = add_ready_hooks(layout_->parameters(), alive_, [this](size_t i) { mark_ready(i); });
}

ShardedGradReducer::~ShardedGradReducer() = default;

torch::Tensor ShardedGradReducer::slot(size_t parameter) const {
  const auto& p = layout_->parameters()[parameter];
  return shares_[layout_->unit_of(parameter)].narrow(0, layout_->offset(parameter), p.numel());
}

// A tensor of the parameter's shape on its slot's memory, not a view: zero_grad may detach it in place.
torch::Tensor ShardedGradReducer::slot_alias(size_t parameter) const {
  const auto& share = shares_[layout_->unit_of(parameter)];
  return torch::empty({0}, share.options())
      .set_(share.storage(), layout_->offset(parameter), layout_->parameters()[parameter].sizes());
}

bool ShardedGradReducer::grad_in_slot(size_t parameter) const {
  const auto& grad = layout_->parameters()[parameter].grad();
  return grad.defined() && grad.is_contiguous() && grad.data_ptr() == slot(parameter).data_ptr();
}

void ShardedGradReducer::reset(Profiler* profiler) {
  profiler_ = profiler;
  finalize_queued_ = false;
  next_unit_ = 0;
  vote_ = 0;
  votes_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t u = 0; u < pending_.size(); ++u) {
    pending_[u] = layout_->units()[u].parameters.size();
    wholes_[u] = layout_->kept(u);
  }
}

void ShardedGradReducer::prepare_for_backward(Profiler* profiler) {
  reset(profiler);
  armed_ = true;
}

void ShardedGradReducer::reduce_without_backward(Profiler* profiler) {
  reset(profiler);
  vote_ = 1;
  for (size_t i = 0; i < ready_.size(); ++i) {
    take_gradient(i, !layout_->parameters()[i].grad().defined());
    ready_[i] = true;
    --pending_[layout_->unit_of(i)];
  }
  launch_ready_units();
  finalize();
}

bool ShardedGradReducer::skip_voted() const { return votes_ > 0; }

void ShardedGradReducer::take_gradient(size_t parameter, bool zeros) {
  auto& p = layout_->parameters()[parameter];
  const size_t u = layout_->unit_of(parameter);
  if (!wholes_[u].defined()) wholes_[u] = unit_buffer(u);
  if (zeros) {
    layout_->place(parameter, wholes_[u]).zero_();
  } else {
    layout_->place(parameter, wholes_[u]).copy_(p.grad());
  }
  // The gradient is in the buffer now: this rank keeps none of another rank's, and its own becomes
  // its slot in the share at once (which the reduce-scatter fills), freeing autograd's tensor.
  if (!layout_->owns(parameter)) {
    p.mutable_grad() = torch::Tensor();
  } else if (options_.gradient_as_bucket_view() && !grad_in_slot(parameter)) {
    p.mutable_grad() = slot_alias(parameter);
  }
}

// A unit's gathered layout with its padding zeroed (each rank's share past what it owns); the
// gradients fill the rest.
torch::Tensor ShardedGradReducer::unit_buffer(size_t u) const {
  const auto& unit = layout_->units()[u];
  auto whole = torch::empty({unit.share * layout_->world_size()}, shares_[u].options());
  for (int64_t r = 0; r < layout_->world_size(); ++r) {
    const int64_t owned = unit.owned[static_cast<size_t>(r)];
    whole.narrow(0, r * unit.share + owned, unit.share - owned).zero_();
  }
  return whole;
}

void ShardedGradReducer::mark_ready(size_t parameter) {
  if (!armed_ || ready_[parameter]) return;
  if (!finalize_queued_) {
    finalize_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  }
  ready_[parameter] = true;
  take_gradient(parameter, false);
  if (--pending_[layout_->unit_of(parameter)] == 0) launch_ready_units();
}

// Units start strictly in order on every rank, so that the collectives match across ranks.
void ShardedGradReducer::launch_ready_units() {
  while (next_unit_ < pending_.size() && pending_[next_unit_] == 0) {
    const size_t u = next_unit_++;
    auto& whole = wholes_[u];
    const int64_t share = layout_->units()[u].share;
    if (u == 0)
      for (int64_t r = 0; r < layout_->world_size(); ++r) whole[(r + 1) * share - 1].fill_(vote_);
    const CollectiveName name("gradient unit", static_cast<int64_t>(u));
    ProfileScope scope(profiler_, "[ShardedGradReducer].reduce_scatter");
    // The share is padded to the unit's longest; this rank keeps what it owns, and the vote.
    torch::Tensor reduced;
    if (layout_->kept(u).defined()) {
      collectives_.all_reduce(whole, Reduce::mean).wait();
      reduced = whole.narrow(0, layout_->rank() * share, share);
    } else {
      reduced = torch::empty({share}, whole.options());
      collectives_.reduce_scatter(reduced, whole, Reduce::mean);
      whole = torch::Tensor();
    }
    shares_[u].copy_(reduced.narrow(0, 0, shares_[u].numel()));
    if (u == 0) votes_ = reduced[share - 1].item<double>();
  }
}

void ShardedGradReducer::finalize() {
  armed_ = false;
  std::vector<std::string> unused;
  for (size_t i = 0; i < ready_.size(); ++i)
    if (!ready_[i]) unused.push_back(names_[i]);
  if (!unused.empty()) {
    ARC_CHECK(options_.find_unused_parameters(), "parameters ", join(unused),
              " got no gradient in this backward, so the ranks cannot average them; set ",
              "find_unused_parameters=true, or use them in the loss");
    for (size_t i = 0; i < ready_.size(); ++i) {
      if (ready_[i]) continue;
      take_gradient(i, true);
      --pending_[layout_->unit_of(i)];
    }
    launch_ready_units();
  }
  for (size_t i = 0; i < ready_.size(); ++i) {
    if (!layout_->owns(i) || grad_in_slot(i)) continue;
    auto& p = layout_->parameters()[i];
    if (options_.gradient_as_bucket_view()) {
      p.mutable_grad() = slot_alias(i);
    } else if (p.grad().defined()) {
      p.mutable_grad().copy_(slot(i).view(p.sizes()));
    } else {
      p.mutable_grad() = slot(i).view(p.sizes()).clone();
    }
  }
}

namespace {

// A parameter's memory, freed and given back: its storage, which every view of it shares (autograd's
// saved tensors too), changes its memory in place.
void free_memory(const torch::Tensor& parameter) {
  auto* storage = parameter.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, parameter.device()));
  storage->set_nbytes(0);
}

void give_memory(const torch::Tensor& parameter) {
  auto* storage = parameter.storage().unsafeGetStorageImpl();
  const auto bytes = parameter.nbytes();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

// The memory of the layout's parameters at `foreign`.
void release_memory(const ShardLayout& layout, const std::vector<size_t>& foreign) {
  for (const size_t p : foreign) free_memory(layout.parameters()[p]);
}

}  // namespace

UnitGather::UnitGather(std::vector<torch::Tensor> parameters, const std::vector<std::string>& names,
                       const std::vector<int64_t>& owners, int64_t world_size, int64_t rank, Collectives& group)
    : layout_(parameters, world_size, rank, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max(), 0,
              owners),
      group_(group),
      pending_(parameters.size(), false) {
  std::vector<torch::Tensor> trainable;
  std::vector<size_t> index;
  for (size_t p = 0; p < parameters.size(); ++p) {
    const auto& parameter = parameters[p];
    ARC_CHECK(parameter.is_contiguous() && parameter.storage_offset() == 0 &&
                  parameter.storage().nbytes() == parameter.nbytes() && parameter.storage().allocator() != nullptr,
              "FULL_SHARD frees the memory of parameter '", names[p], "' where another rank owns it, but it shares ",
              "its memory with other tensors (a view, or memory it does not own); give it a tensor of its own ",
              "(register_parameter(name, tensor.clone())), or use sharding_strategy SHARD_GRAD_OP");
    if (!layout_.owns(p)) foreign_.push_back(p);
    if (parameter.requires_grad()) trainable.push_back(parameter), index.push_back(p);
  }
  // Parameters frozen now have no accumulator; unfrozen later, they are released at the backward's end.
  accumulators_ = add_ready_hooks(trainable, alive_, [this, index](size_t i) { accumulated(index[i]); });
}

// A gather still in flight is not waited for (its group may be gone): what it writes into, the
// parameters' storage, stays alive as long as the collective holds it.
UnitGather::~UnitGather() {
  *alive_ = false;
  prefetch_with(nullptr);
}

void UnitGather::prefetch_with(std::shared_ptr<UnitOrder> order) {
  if (order_ && place_ >= 0) order_->units_[static_cast<size_t>(place_)] = nullptr;
  order_ = std::move(order);
  place_ = -1;
}

void UnitGather::prefetch() {
  if (gathered_) return;
  for (const size_t p : foreign_) give_memory(layout_.parameters()[p]);
  gathered_ = true;
  std::vector<PendingWork> works;
  try {
    for (size_t u = 0; u < layout_.units().size(); ++u) works.push_back(layout_.start_sharing(u, group_));
  } catch (...) {
    drain(std::move(works));
    release_memory(layout_, foreign_);
    gathered_ = false;
    throw;
  }
  in_flight_ = all_of(std::move(works));
}

// A failed gather (all_of has waited for every collective of it) leaves the unit released.
void UnitGather::gather() {
  prefetch();
  auto work = std::exchange(in_flight_, PendingWork());
  try {
    work.wait();
  } catch (...) {
    release_memory(layout_, foreign_);
    gathered_ = false;
    throw;
  }
}

void UnitGather::gather_for_forward() {
  gather();
  if (!order_) return;
  auto& units = order_->units_;
  if (place_ < 0) {
    place_ = static_cast<int64_t>(units.size());
    units.push_back(this);
  }
  const auto next = static_cast<size_t>(place_ + 1);
  if (!order_->forward_ || next >= units.size() || units[next] == nullptr) return;
  try {
    units[next]->prefetch();
  } catch (...) {
    release();  // the forward that gathered it does not run
    throw;
  }
}

void UnitGather::release() {
  if (!gathered_) return;
  gather();  // a gather in flight writes into the memory freed here
  release_memory(layout_, foreign_);
  gathered_ = false;
  pending_count_ = 0;
  // A backward that failed never runs its queued release: the next one queues its own.
  release_queued_ = false;
}

UnitGather* UnitGather::previous() const {
  return order_ && place_ > 0 ? order_->units_[static_cast<size_t>(place_ - 1)] : nullptr;
}

// A gather started ahead of a backward is released at the backward's end if the unit never ran.
void UnitGather::prefetch_previous(const char* when) {
  auto* unit = previous();
  if (unit == nullptr || unit->gathered_ || order_->backward_ != when) return;
  unit->prefetch();
  unit->release_after_backward();
}

void UnitGather::gather_for_backward() {
  if (!gathered()) {
    gather();
    pending_count_ = 0;
    for (size_t p = 0; p < pending_.size(); ++p) {
      pending_[p] = layout_.parameters()[p].requires_grad();
      pending_count_ += pending_[p] ? 1 : 0;
    }
    prefetch_previous("BACKWARD_PRE");
  }
  release_after_backward();
}

void UnitGather::release_after_backward() {
  if (release_queued_) return;
  release_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this, alive = std::weak_ptr<bool>(alive_)] {
    if (alive.expired()) return;
    release_queued_ = false;
    release();
  });
}

// Once the backward has accumulated every gradient of the unit, no node of it runs again.
void UnitGather::accumulated(size_t parameter) {
  if (pending_count_ == 0 || !pending_[parameter]) return;
  pending_[parameter] = false;
  if (--pending_count_ > 0) return;
  release();
  prefetch_previous("BACKWARD_POST");
}

void UnitOrder::release_unused() {
  for (auto* unit : units_)
    if (unit != nullptr && unit->prefetching()) unit->release();
}

}  // namespace arc
