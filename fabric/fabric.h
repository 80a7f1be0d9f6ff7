// arc::Fabric: the low-level facade for people who write their own loop, as Lightning's Fabric: the
// same accelerators, strategies, launchers, precision and checkpoints as the Trainer, none of its loop.
#pragma once

#include <arc/base/reduce.h>
#include <arc/data/batch.h>
#include <arc/data/data_loader.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/fabric_options.h>
#include <arc/fabric/precision.h>
#include <arc/loggers/logger.h>

#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace arc {

class AcceleratorBackend;
class Strategy;

/// What Fabric::save writes and Fabric::load restores, as Fabric's state dictionary:
/// modules and optimizers by name, restored in place, and JSON `values` (the step, the epoch,
/// anything else), which load replaces with the file's.
class FabricState {
 public:
  /// Adds a module or an optimizer under `name`, which must be new, not empty and without '/';
  /// returns the state, so that adds chain.
  ///@{
  FabricState& add(const std::string& name, torch::nn::Module& module);
  FabricState& add(const std::string& name, torch::optim::Optimizer& optimizer);
  ///@}
  /// Whatever else the file keeps (the step, the epoch, ...): a JSON object.
  nlohmann::json values = nlohmann::json::object();

 private:
  friend class Fabric;
  void check_name(const std::string& name) const;
  std::vector<std::pair<std::string, torch::nn::Module*>> modules_;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers_;
};

/// Picks hardware, process topology and precision from FabricOptions; under ddp_spawn,
/// constructing it starts the other ranks, which run the same program. Its loggers take what log
/// and log_dict send; every rank agrees on their versions, as under a Trainer.
class Fabric {
 public:
  /// Sets up the run that `options` describe.
  explicit Fabric(FabricOptions options = FabricOptions());
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  /// Moves `model` to this rank's device (and type, under "64-true", "bf16-true", "16-true"),
  /// copies rank 0's weights to every rank and wires gradient averaging into backward().
  void prepare(torch::nn::Module& model);
  /// Checks that the optimizer's parameters live on this rank's device.
  void prepare(torch::optim::Optimizer& optimizer);
  /// A loader over this rank's shard of `data`.
  std::unique_ptr<DataLoader> prepare(const DataSource& data);
  /// `batch` on this rank's device; floating tensors in the module's type under the true precisions.
  Batch prepare_batch(const Batch& batch) const;
  /// Autocast for the mixed precisions while it lives (nothing otherwise): hold one around the
  /// forward pass and the loss, as Fabric's `autocast()`.
  Precision::ForwardContext autocast() const { return precision_->forward_context(); }
  /// loss.backward() (the loss scaled under "16-mixed"), with gradients averaged across ranks
  /// unless `sync` is false (accumulation).
  void backward(const torch::Tensor& loss, bool sync = true);
  /// Gradients back to their true size under "16-mixed"; call before reading or clipping them.
  /// step() unscales what is still scaled.
  void unscale_gradients(torch::optim::Optimizer& optimizer);
  /// The gradients of `optimizer`'s parameters, unscaled first under "16-mixed": their total 2-norm
  /// clipped to `clip_val` ("norm", Fabric's max_norm; returns the norm before clipping) or each
  /// value into [-clip_val, clip_val] ("value", Fabric's clip_val).
  std::optional<double> clip_gradients(torch::optim::Optimizer& optimizer, double clip_val,
                                       const std::string& algorithm = "norm");
  /// optimizer.step(), except under "16-mixed", where a step whose gradients hold inf/NaN is
  /// skipped and the loss scale adapts; returns whether the optimizer stepped.
  bool step(torch::optim::Optimizer& optimizer);
  /// The precision in effect ("16-mixed" asked for on the CPU reads "bf16-mixed").
  const std::string& precision() const { return precision_->name(); }

  /// Every rank calls it: rank 0 writes `state` and the loss scale of "16-mixed" to `path` (its
  /// folder made; through a temporary file, fsync and rename, so a crash leaves the previous file),
  /// and every rank returns once the file is there, or throws rank 0's error.
  void save(const std::string& path, const FabricState& state);
  /// Restores `state` from `path` on every rank: each module and optimizer from the entry of its
  /// name, `values` replaced by the file's, and the loss scale. `strict`: every name of `state` must
  /// be in the file and every module's parameters match; otherwise what is on one side only is left
  /// alone and returned, as "<name>" or "<name>/<parameter>". A Trainer's checkpoint loads too (its
  /// module is "model", its optimizers "optimizer_0", "optimizer_1", ...). A missing, corrupt or
  /// mismatched file is an arc::Error that says which.
  LoadResult load(const std::string& path, FabricState& state, bool strict = true);

  /// Fabric's log_dict: `values` to every logger at `step`, from rank 0 only (reduce other ranks'
  /// values first, with all_reduce_dict, to log their mean).
  void log_dict(const std::map<std::string, double>& values, int64_t step);
  /// log_dict of one value.
  void log(const std::string& name, double value, int64_t step) { log_dict({{name, value}}, step); }
  /// The run's hyper-parameters to every logger (hparams.yaml, TensorBoard's), from rank 0.
  void log_hyperparams(const nlohmann::json& hparams);
  /// Fabric's call: runs `hook` with `args` on every callback of class `T` (or of a class derived
  /// from it) among the options' callbacks, in their order; the others are left out, as Lightning's
  /// call skips callbacks without the method: `fabric.call(&MyHooks::on_epoch_end, epoch, loss)`.
  template <typename T, typename... Params, typename... Args>
  void call(void (T::*hook)(Params...), Args&&... args) {
    static_assert(std::is_base_of_v<FabricCallback, T>, "Fabric::call calls hooks of FabricCallback classes");
    for (const auto& callback : options_.callbacks())
      if (auto* target = dynamic_cast<T*>(callback.get())) (target->*hook)(args...);
  }
  /// The loggers of its options.
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return options_.loggers(); }

  /// Every value reduced across ranks with one collective.
  std::map<std::string, torch::Tensor> all_reduce_dict(const std::map<std::string, torch::Tensor>& values,
                                                       Reduce op = Reduce::mean);
  /// A reduced copy of `tensor` (as Fabric's all_reduce).
  torch::Tensor all_reduce(const torch::Tensor& tensor, Reduce op = Reduce::mean);
  /// `tensor` reduced in place (as torch.distributed.all_reduce), with no copy of it made when it
  /// comes from reduce_buffer.
  void all_reduce_(torch::Tensor& tensor, Reduce op = Reduce::mean);
  /// A zeroed tensor (on this rank's device unless `options` name one) for repeated all_reduce_
  /// calls, as DDP's gradient buckets are: with ranks on one node's CPU it lies in memory that
  /// every rank maps, and all_reduce_ reduces it there, without copying it through the slots.
  /// Every rank calls it, in the same order and with the same arguments.
  torch::Tensor reduce_buffer(torch::IntArrayRef sizes, torch::TensorOptions options = {});
  /// Sets `tensor`, in place, to rank `src`'s.
  void broadcast(torch::Tensor& tensor, int64_t src = 0);
  /// `text` as rank `src` has it (any serialisable object goes through this).
  std::string broadcast(const std::string& text, int64_t src = 0);
  /// `tensor` as every rank has it, in rank order; the ranks' tensors must have one shape and type.
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor);
  /// Waits until every rank got there.
  void barrier();
  /// Runs `fn(rank)` on every rank and gives every rank all ranks' results, in rank order.
  std::vector<nlohmann::json> distribute(const std::function<nlohmann::json(int64_t rank)>& fn);

  /// This process's rank among all, from 0.
  int64_t global_rank() const;
  /// This process's rank on its machine, from 0.
  int64_t local_rank() const;
  /// The number of processes that run together.
  int64_t world_size() const;
  /// Whether this is rank 0.
  bool is_global_zero() const;
  /// This rank's device, where prepare puts the model and the batches.
  torch::Device device() const;
  /// The strategy the options chose ("single_device", "ddp", ...).
  Strategy& strategy() const { return *strategy_; }

 private:
  /// load's work, once the file is open and verified.
  LoadResult load_checked(const CheckpointReader& checkpoint, FabricState& state, bool strict);

  FabricOptions options_;
  std::shared_ptr<AcceleratorBackend> backend_;
  std::shared_ptr<Strategy> strategy_;
  std::unique_ptr<Precision> precision_;
  /// Exceptions in flight when it was made: more at destruction mean one ends the loop.
  int uncaught_ = std::uncaught_exceptions();
};

/// The names this facade had before it took Fabric's: kept for one release.
///@{
using Accelerator [[deprecated("arc::Accelerator is arc::Fabric, built from FabricOptions")]] = Fabric;
using AcceleratorState [[deprecated("arc::AcceleratorState is arc::FabricState")]] = FabricState;
///@}

}  // namespace arc
