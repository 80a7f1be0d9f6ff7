// SyncBatchNorm: batch normalization whose training statistics are those of the whole global batch,
// every rank's samples together (PyTorch's torch.nn.SyncBatchNorm, which Lightning's
// sync_batchnorm=True swaps in). LibTorch cannot swap a layer behind a module's member, so a model
// that wants it builds its layers as arc::SyncBatchNorm; TrainerOptions::sync_batchnorm(true) (or
// arc::Accelerator under the same option) then connects them to the ranks. Unconnected, or in eval
// mode, it is plain BatchNorm: the same parameters, buffers and names as torch::nn::BatchNorm{1,2,3}d,
// so checkpoints move between the two.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <optional>

namespace arc {

class Collectives;

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);

  void reset() override;
  /// `input`: (N, C, ...) with C = num_features.
  torch::Tensor forward(const torch::Tensor& input);
  /// The ranks whose statistics training combines; null: this process's batch alone.
  void set_collectives(Collectives* collectives) { collectives_ = collectives; }

  torch::nn::BatchNormOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  Collectives* collectives_ = nullptr;
};

TORCH_MODULE(SyncBatchNorm);

/// A BatchNorm layer's pieces: LibTorch's BatchNorm{1,2,3}d or an arc::SyncBatchNorm.
struct BatchNormLayer {
  torch::nn::BatchNormOptions* options;
  torch::Tensor running_mean, running_var, num_batches_tracked;  // undefined without running statistics
  bool synced;                                                   // an arc::SyncBatchNorm
};
/// `module` as a BatchNorm layer, or nullopt for any other module.
std::optional<BatchNormLayer> batch_norm_of(torch::nn::Module& module);

/// TrainerOptions::sync_batchnorm: with `sync`, connects every SyncBatchNorm of `module` to
/// `collectives` (null: one process), and a torch::nn::BatchNorm{1,2,3}d in `module` is an error
/// that names it and says to build it as arc::SyncBatchNorm; without, disconnects them.
void connect_sync_batch_norms(torch::nn::Module& module, Collectives* collectives, bool sync);

}  // namespace arc
