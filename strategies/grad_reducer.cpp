// GradReducer.
#include <arc/strategies/grad_reducer.h>

#include <arc/base/error.h>
#include <arc/profilers/profiler.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <cstddef>
#include <cstring>

namespace arc {

std::vector<std::shared_ptr<torch::autograd::Node>> add_ready_hooks(const std::vector<torch::Tensor>& parameters,
                                                                    const std::shared_ptr<bool>& alive,
                                                                    std::function<void(size_t)> ready) {
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[i]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [i, ready, token = std::weak_ptr<bool>(alive)](const torch::autograd::variable_list& outputs,
                                                       const torch::autograd::variable_list&) {
          if (token.lock()) ready(i);
          return outputs;
        }));
    accumulators.push_back(std::move(accumulator));
  }
  return accumulators;
}

struct GradReducer::Bucket {
  torch::Tensor buffer;
  size_t pending = 0;
  PendingWork work;
};

GradReducer::GradReducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names,
                         Collectives& collectives, ReducerOptions options)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      collectives_(collectives),
      options_(options),
      bucket_of_(parameters_.size()),
      offset_of_(parameters_.size()),
      ready_(parameters_.size(), false),
      unused_in_graph_(parameters_.size(), false) {
  // Reverse registration order approximates the order in which backward produces gradients.
  int64_t cap = options_.first_bucket_bytes();
  int64_t bytes = 0;
  for (size_t i = parameters_.size(); i-- > 0;) {
    const auto& p = parameters_[i];
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    const bool new_dtype = !layout_.empty() && parameters_[layout_.back().front()].scalar_type() != p.scalar_type();
    if (layout_.empty() || new_dtype || (bytes > 0 && bytes + size > cap)) {
      if (!layout_.empty()) cap = options_.bucket_bytes();
      layout_.emplace_back();
      bytes = 0;
    }
    layout_.back().push_back(i);
    bytes += size;
  }
  for (size_t b = 0; b < layout_.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    int64_t numel = 0;
    for (const size_t i : layout_[b]) {
      bucket_of_[i] = b;
      offset_of_[i] = numel;
      numel += parameters_[i].numel();
    }
    const auto& first = parameters_[layout_[b].front()];
    const auto options = first.options().requires_grad(false);
    const int64_t size = numel + (b == 0 ? 1 : 0);
    bucket->buffer =
        options_.shared_buckets() ? collectives_.reduce_buffer(size, options) : torch::zeros({size}, options);
    buckets_.push_back(std::move(bucket));
  }
  if (!buckets_.empty()) skip_vote_ = buckets_.front()->buffer.narrow(0, buckets_.front()->buffer.numel() - 1, 1);
  accumulators_ = add_ready_hooks(parameters_, alive_, [this](size_t i) { mark_ready(i); });
}

GradReducer::~GradReducer() = default;

torch::Tensor GradReducer::slot(size_t parameter) const {
  return buckets_[bucket_of_[parameter]]->buffer.narrow(0, offset_of_[parameter], parameters_[parameter].numel());
}

std::byte* GradReducer::slot_data(size_t parameter) const {
  const auto& buffer = buckets_[bucket_of_[parameter]]->buffer;
  return static_cast<std::byte*>(buffer.data_ptr()) + offset_of_[parameter] * buffer.element_size();
}

// By address, without making a tensor of the slot: it runs for every parameter of every step.
bool GradReducer::grad_in_slot(size_t parameter) const {
  const auto& grad = parameters_[parameter].grad();
  return grad.defined() && grad.is_contiguous() && grad.data_ptr() == slot_data(parameter);
}

// A plain memcpy where it can (a dense CPU gradient of the bucket's type and the slot's size): this
// runs for every parameter of every step, and copy_ of a narrowed slot builds two tensors and an
// iterator first.
void GradReducer::copy_to_slot(size_t parameter) {
  const auto& grad = parameters_[parameter].grad();
  const auto& buffer = buckets_[bucket_of_[parameter]]->buffer;
  if (grad.layout() == torch::kStrided && grad.is_contiguous() && grad.device().is_cpu() && buffer.device().is_cpu() &&
      grad.scalar_type() == buffer.scalar_type() && grad.numel() == parameters_[parameter].numel()) {
    std::memcpy(slot_data(parameter), grad.data_ptr(), grad.nbytes());
    return;
  }
  slot(parameter).copy_(grad.reshape({-1}));
}

// A tensor of the parameter's shape on the slot's memory, not a view (the optimizer's zero_grad may
// detach it in place, which autograd refuses for views).
torch::Tensor GradReducer::slot_alias(size_t parameter) const {
  const auto& buffer = buckets_[bucket_of_[parameter]]->buffer;
  return torch::empty({0}, buffer.options())
      .set_(buffer.storage(), offset_of_[parameter], parameters_[parameter].sizes());
}

void GradReducer::reset(Profiler* profiler) {
  profiler_ = profiler;
  finalize_queued_ = false;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b]->pending = layout_[b].size();
    buckets_[b]->work = PendingWork();
  }
  if (skip_vote_.defined()) skip_vote_.zero_();
}

void GradReducer::prepare_for_backward(Profiler* profiler) {
  reset(profiler);
  armed_ = true;
  if (!graph_learned_) return;
  // static_graph: the parameters the graph leaves out are ready, as zeros, before backward starts.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!unused_in_graph_[i]) continue;
    slot(i).zero_();
    ready_[i] = true;
    --buckets_[bucket_of_[i]]->pending;
  }
  launch_ready_buckets();
}

void GradReducer::reduce_without_backward(Profiler* profiler) {
  reset(profiler);
  if (!skip_vote_.defined()) return;
  skip_vote_.fill_(1);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& grad = parameters_[i].grad();
    if (!grad.defined()) {
      slot(i).zero_();
    } else if (!grad_in_slot(i)) {
      copy_to_slot(i);
    }
    ready_[i] = true;
    buckets_[bucket_of_[i]]->pending = 0;
  }
  launch_ready_buckets();
  finalize();
}

bool GradReducer::skip_voted() const { return skip_vote_.defined() && skip_vote_.item<double>() > 0; }

void GradReducer::mark_ready(size_t parameter) {
  if (!armed_) return;
  ARC_CHECK(!unused_in_graph_[parameter], "static_graph is on, but parameter ", names_[parameter],
            " got a gradient although the first backward gave it none: the graph changes between steps; turn ",
            "static_graph off (and set find_unused_parameters=true)");
  if (ready_[parameter]) return;
  if (!finalize_queued_) {
    finalize_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  }
  ready_[parameter] = true;
  auto& bucket = *buckets_[bucket_of_[parameter]];
  if (!grad_in_slot(parameter)) {
    copy_to_slot(parameter);
    // The slot becomes the gradient at once, freeing autograd's tensor while backward goes on: a
    // backward after zero_grad (set_to_none) holds one gradient more than the buckets, not all.
    if (options_.gradient_as_bucket_view()) parameters_[parameter].mutable_grad() = slot_alias(parameter);
  }
  --bucket.pending;
  if (bucket.pending == 0) launch_ready_buckets();
}

// Buckets start strictly in order on every rank, so that the collectives match across ranks.
void GradReducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_]->pending == 0) {
    const CollectiveName name("gradient bucket", static_cast<int64_t>(next_bucket_));
    auto& bucket = *buckets_[next_bucket_++];
    ProfileScope scope(profiler_, "[GradReducer].all_reduce");
    bucket.work = collectives_.all_reduce(bucket.buffer, Reduce::mean);
  }
}

void GradReducer::finalize() {
  armed_ = false;
  late_buckets_ = buckets_.size() - next_bucket_;
  std::vector<std::string> unused;
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (!ready_[i]) unused.push_back(names_[i]);
  const bool learning = options_.static_graph() && !graph_learned_;
  if (!unused.empty()) {
    ARC_CHECK(!graph_learned_, "static_graph is on, but parameters ", join(unused),
              " got no gradient although the first backward gave them one: the graph changes between steps; ",
              "turn static_graph off and set find_unused_parameters=true");
    ARC_CHECK(options_.find_unused_parameters() || learning, "parameters ", join(unused),
              " got no gradient in this backward, so the ranks cannot average them; set ",
              "find_unused_parameters=true (or static_graph=true when every step leaves out the same ones), ",
              "or use them in the loss");
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (ready_[i]) continue;
      unused_in_graph_[i] = learning;
      auto& bucket = *buckets_[bucket_of_[i]];
      slot(i).zero_();
      --bucket.pending;
    }
    launch_ready_buckets();
  }
  graph_learned_ = graph_learned_ || learning;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    {
      ProfileScope scope(profiler_, "[GradReducer].wait");
      bucket->work.wait();
    }
    for (const size_t i : layout_[b]) {
      if (grad_in_slot(i)) continue;
      if (options_.gradient_as_bucket_view()) {
        parameters_[i].mutable_grad() = slot_alias(i);
      } else if (parameters_[i].grad().defined()) {
        parameters_[i].mutable_grad().copy_(slot(i).view(parameters_[i].sizes()));
      } else {
        parameters_[i].mutable_grad() = slot(i).view(parameters_[i].sizes()).clone();
      }
    }
  }
}

}  // namespace arc
