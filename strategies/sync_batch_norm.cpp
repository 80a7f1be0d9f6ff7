// SyncBatchNorm.
#include <arc/strategies/sync_batch_norm.h>

#include <arc/base/error.h>
#include <arc/strategies/collectives.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <cstdint>

namespace arc {
namespace {

// A sum over the ranks that autograd sees through: every rank's loss depends on the sum, so the
// gradient of each rank's part is the sum of every rank's gradient of it.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& local,
                               int64_t collectives) {
    context->saved_data["collectives"] = collectives;
    auto summed = local.clone();
    reinterpret_cast<Collectives*>(collectives)->all_reduce(summed, Reduce::sum).wait();
    return summed;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list grads) {
    auto summed = grads[0].contiguous().clone();
    reinterpret_cast<Collectives*>(context->saved_data["collectives"].toInt())->all_reduce(summed, Reduce::sum).wait();
    return {summed, torch::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_) : options(options_) { reset(); }

void SyncBatchNormImpl::reset() {
  const int64_t features = options.num_features();
  ARC_CHECK(features > 0, "SyncBatchNorm: num_features is ", features, "; give the number of channels (> 0)");
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({features}));
    bias = register_parameter("bias", torch::zeros({features}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({features}));
    running_var = register_buffer("running_var", torch::ones({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  const int64_t features = options.num_features();
  ARC_CHECK(input.dim() >= 2 && input.size(1) == features, "SyncBatchNorm(", features, ") expects input of shape (N, ",
            features, ", ...), got ", input.sizes());
  // PyTorch's rule: the running statistics' update factor is momentum, or a cumulative average
  // when momentum is unset.
  double factor = 0;
  if (is_training() && options.track_running_stats()) {
    num_batches_tracked.add_(1);
    factor = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
  }
  const bool batch_statistics = is_training() || !options.track_running_stats();
  if (!batch_statistics || collectives_ == nullptr || collectives_->world_size() == 1)
    return torch::batch_norm(input, weight, bias, running_mean, running_var, batch_statistics, factor, options.eps(),
                             at::globalContext().userEnabledCuDNN());

  // The global batch's per-channel sum, sum of squares and count, in one all-reduce; summed in
  // double, so that the variance from them keeps float precision.
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  const auto local_count = static_cast<double>(input.numel() / features);
  auto local = torch::cat({input.sum(dims, false, torch::kDouble), input.square().sum(dims, false, torch::kDouble),
                           torch::full({1}, local_count, input.options().dtype(torch::kDouble))});
  const auto global = AllReduceSum::apply(local, static_cast<int64_t>(reinterpret_cast<intptr_t>(collectives_)));
  const auto count = global.narrow(0, 2 * features, 1);
  const auto mean = global.narrow(0, 0, features) / count;
  const auto variance = global.narrow(0, features, features) / count - mean.square();
  if (is_training() && options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    const double n = count.item<double>();
    ARC_CHECK(n > 1, "SyncBatchNorm: the global batch holds ", n, " value(s) per channel; training needs more than 1");
    running_mean.mul_(1 - factor).add_(mean.to(running_mean.scalar_type()), factor);
    running_var.mul_(1 - factor).add_((variance * (n / (n - 1))).to(running_var.scalar_type()), factor);
  }
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = features;
  auto output = (input - mean.to(input.scalar_type()).view(shape)) *
                (variance + options.eps()).rsqrt().to(input.scalar_type()).view(shape);
  if (options.affine()) output = output * weight.view(shape) + bias.view(shape);
  return output;
}

namespace {

template <typename Layer>
std::optional<BatchNormLayer> layer_of(torch::nn::Module& module, bool synced) {
  auto* layer = dynamic_cast<Layer*>(&module);
  if (layer == nullptr) return std::nullopt;
  return BatchNormLayer{&layer->options, layer->running_mean, layer->running_var, layer->num_batches_tracked, synced};
}

void connect(torch::nn::Module& layer, const std::string& name, Collectives* collectives, bool required) {
  if (auto* synced = dynamic_cast<SyncBatchNormImpl*>(&layer)) synced->set_collectives(collectives);
  const auto norm = batch_norm_of(layer);
  const bool plain = norm && !norm->synced;
  ARC_CHECK(!required || !plain, "sync_batchnorm is on, but '", name, "' is a ", layer.name(),
            ", whose statistics LibTorch cannot synchronize; build it as arc::SyncBatchNorm(num_features) (same ",
            "parameters and checkpoint names), or turn sync_batchnorm off");
}

}  // namespace

std::optional<BatchNormLayer> batch_norm_of(torch::nn::Module& module) {
  if (auto layer = layer_of<torch::nn::BatchNorm1dImpl>(module, false)) return layer;
  if (auto layer = layer_of<torch::nn::BatchNorm2dImpl>(module, false)) return layer;
  if (auto layer = layer_of<torch::nn::BatchNorm3dImpl>(module, false)) return layer;
  return layer_of<SyncBatchNormImpl>(module, true);
}

void connect_sync_batch_norms(torch::nn::Module& module, Collectives* collectives, bool sync) {
  Collectives* group = sync ? collectives : nullptr;
  // The module may live on the stack, so it is not among its own named_modules.
  connect(module, module.name(), group, sync);
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    connect(*item.value(), item.key(), group, sync);
}
}  // namespace arc
