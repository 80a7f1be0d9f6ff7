// SyncBatchNorm: batch normalization whose training statistics are those of the whole global batch,
// every rank's samples together (PyTorch's torch.nn.SyncBatchNorm, which Lightning's
// sync_batchnorm=True swaps in). LibTorch cannot swap a layer behind a module's member, so a model
// that wants it builds its layers as arc::SyncBatchNorm; TrainerOptions::sync_batchnorm(true) (or
// arc::Fabric under the same option) then connects them to the ranks. Unconnected, or in eval
// mode, it is plain BatchNorm: the same parameters, buffers and names as torch::nn::BatchNorm{1,2,3}d,
// so checkpoints move between the two.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <optional>

namespace arc {

class Collectives;

/// The layer behind the SyncBatchNorm module holder (LibTorch's Impl class): batch normalization with
/// the statistics of every rank's training samples together once connected.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  /// A layer over `num_features` channels, with BatchNorm's default options.
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  /// A layer with BatchNorm's `options` (affine, track_running_stats, momentum, eps).
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);

  /// Registers the parameters and buffers that `options` asks for, at their initial values.
  void reset() override;
  /// `input`: (N, C, ...) with C = num_features.
  torch::Tensor forward(const torch::Tensor& input);
  /// The ranks whose statistics training combines; null: this process's batch alone.
  void set_collectives(Collectives* collectives) { collectives_ = collectives; }

  /// The layer's options.
  torch::nn::BatchNormOptions options;
  /// The parameters (with `affine`) and running-statistics buffers (with `track_running_stats`),
  /// named as torch::nn::BatchNorm's; undefined without.
  ///@{
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  ///@}

 private:
  Collectives* collectives_ = nullptr;
};

/// The module holder of SyncBatchNormImpl, as torch::nn::BatchNorm2d is of BatchNorm2dImpl: build
/// layers as `SyncBatchNorm(num_features)` and register them with register_module.
TORCH_MODULE(SyncBatchNorm);

/// A BatchNorm layer's pieces: LibTorch's BatchNorm{1,2,3}d or an arc::SyncBatchNorm.
struct BatchNormLayer {
  /// The layer's options.
  torch::nn::BatchNormOptions* options;
  /// The running-statistics buffers, undefined without running statistics.
  ///@{
  torch::Tensor running_mean, running_var, num_batches_tracked;
  ///@}
  /// Whether the layer is an arc::SyncBatchNorm.
  bool synced;
};
/// `module` as a BatchNorm layer, or nullopt for any other module.
std::optional<BatchNormLayer> batch_norm_of(torch::nn::Module& module);

/// TrainerOptions::sync_batchnorm: with `sync`, connects every SyncBatchNorm of `module` to
/// `collectives` (null: one process), and a torch::nn::BatchNorm{1,2,3}d in `module` is an error
/// that names it and says to build it as arc::SyncBatchNorm; without, disconnects them.
void connect_sync_batch_norms(torch::nn::Module& module, Collectives* collectives, bool sync);

}  // namespace arc
