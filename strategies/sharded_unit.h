// arc::ShardedUnit: a submodule whose parameters strategy fsdp's FULL_SHARD divides among the ranks,
// gathered for the unit's forward and backward and freed after them. Under any other strategy it is
// the module it wraps, under the same parameter names.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace arc {

/// What FULL_SHARD does around a unit's forward and backward (the strategy's; see ShardedUnitBase).
class UnitSharding {
 public:
  virtual ~UnitSharding() = default;
  /// Gives the unit's parameters of other ranks their memory and values (a collective: every rank
  /// calls it alike); nothing where they are whole already.
  virtual void gather() = 0;
  /// Called before the unit's forward: gathers (and may start gathering the next unit's).
  virtual void gather_for_forward() { gather(); }
  /// Frees the memory of the unit's parameters of other ranks.
  virtual void release() = 0;
  /// Called when a backward reaches the unit's outputs: gathers, and releases again once the
  /// backward no longer needs them.
  virtual void gather_for_backward() = 0;
};

class ShardedUnitBase;

/// Told of each ShardedUnit made on this thread while it is current: strategy fsdp's FULL_SHARD,
/// while configure_model builds the model (Strategy::build_model), shards each unit as it is made.
class UnitBuilder {
 public:
  virtual ~UnitBuilder() = default;
  /// `unit` was just made, the wrapped module's parameters initialized.
  virtual void built(ShardedUnitBase& unit) = 0;
};

/// Runs `fn` with `builder` told of every ShardedUnit made on this thread meanwhile.
void with_unit_builder(UnitBuilder& builder, const std::function<void()>& fn);

/// The part of ShardedUnit that does not depend on the wrapped type.
class ShardedUnitBase : public torch::nn::Module {
 public:
  /// `name`: the wrapped module's, which the unit takes (a model summary shows the layer's type).
  explicit ShardedUnitBase(std::string name) : torch::nn::Module(std::move(name)) {}
  /// Set by strategy fsdp with FULL_SHARD; null (the default) makes the unit its module.
  void shard_with(std::shared_ptr<UnitSharding> sharding) { sharding_ = std::move(sharding); }
  /// What shards it (null: nothing).
  const std::shared_ptr<UnitSharding>& sharding() const { return sharding_; }
  /// The wrapped module.
  virtual torch::nn::Module& wrapped() const = 0;
  /// Sets training mode here and in the wrapped module.
  void train(bool on = true) override;
  /// Prints the wrapped module.
  void pretty_print(std::ostream& stream) const override;

 protected:
  /// Registers `module`'s submodules, parameters and buffers as this unit's own, under their names,
  /// and tells the thread's UnitBuilder, if any, that the unit is made.
  void adopt(torch::nn::Module& module);
  /// Around the wrapped forward: gathers before, and after it arms the gather for the backward of
  /// `outputs` (those that require gradients) and releases.
  ///@{
  void before_forward();
  void after_forward(const std::vector<torch::Tensor>& outputs);
  ///@}
  /// Releases after a wrapped forward that threw (a local step: no rank waits for it).
  void release_after_failure();

 private:
  std::shared_ptr<UnitSharding> sharding_;
};

namespace detail {

inline void collect_tensors(const torch::Tensor& value, std::vector<torch::Tensor>& out) { out.push_back(value); }
inline void collect_tensors(const std::vector<torch::Tensor>& values, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), values.begin(), values.end());
}
template <typename... Values>
void collect_tensors(const std::tuple<Values...>& values, std::vector<torch::Tensor>& out) {
  std::apply([&out](const auto&... each) { (collect_tensors(each, out), ...); }, values);
}

template <typename Impl, typename Forward>
class ShardedUnitOf;

/// ShardedUnitImpl's forward takes what the wrapped module's forward takes.
template <typename Impl, typename Class, typename Result, typename... Args>
class ShardedUnitOf<Impl, Result (Class::*)(Args...)> : public ShardedUnitBase {
 public:
  /// Runs the wrapped module's forward with the unit's parameters gathered.
  Result forward(Args... args) {
    before_forward();
    Result result = [&] {
      try {
        return module_->forward(std::forward<Args>(args)...);
      } catch (...) {
        release_after_failure();
        throw;
      }
    }();
    std::vector<torch::Tensor> outputs;
    collect_tensors(result, outputs);
    after_forward(outputs);
    return result;
  }

 protected:
  explicit ShardedUnitOf(std::shared_ptr<Impl> module) : ShardedUnitBase(module->name()), module_(std::move(module)) {}
  std::shared_ptr<Impl> module_;
};

/// The module class of `T`: the contained class of a holder (torch::nn::Linear), else `T` itself.
template <typename T, typename = void>
struct ImplOf {
  using type = T;
};
template <typename T>
struct ImplOf<T, std::void_t<typename T::ContainedType>> {
  using type = typename T::ContainedType;
};
template <typename T>
using impl_of = typename ImplOf<T>::type;

}  // namespace detail

/// A FULL_SHARD unit wrapping `ModuleType` (a holder such as torch::nn::Linear, or a module class):
/// `arc::ShardedUnit<Block> block = register_module("block", arc::ShardedUnit<Block>(Block(...)))`.
/// Its parameters keep the wrapped module's names ("block.fc.weight"). The wrapped forward must be
/// one non-const member function returning a tensor, a vector of tensors or a tuple of them.
/// During a stage (fit, validate, test, predict) a unit's parameters have no memory on the ranks
/// that do not own them outside the unit's forward and backward: reading them there (an L2 term over
/// module.parameters() in training_step, say) is an error that the strategy cannot catch;
/// checkpoints gather them, and the stage's end leaves the module whole.
template <typename ModuleType>
class ShardedUnitImpl
    : public detail::ShardedUnitOf<detail::impl_of<ModuleType>, decltype(&detail::impl_of<ModuleType>::forward)> {
 public:
  /// The wrapped module's class.
  using Impl = detail::impl_of<ModuleType>;

  /// Wraps `module`.
  explicit ShardedUnitImpl(std::shared_ptr<Impl> module)
      : detail::ShardedUnitOf<Impl, decltype(&Impl::forward)>(std::move(module)) {
    this->adopt(*this->module_);
  }
  /// Wraps the module that `holder` holds.
  template <typename Holder, typename = typename Holder::ContainedType>
  explicit ShardedUnitImpl(const Holder& holder) : ShardedUnitImpl(holder.ptr()) {}

  /// ShardedUnitBase's: see there.
  torch::nn::Module& wrapped() const override { return *this->module_; }
  /// The wrapped module.
  Impl& module() { return *this->module_; }
};

/// The holder of ShardedUnitImpl<ModuleType>, as TORCH_MODULE makes them.
template <typename ModuleType>
class ShardedUnit : public torch::nn::ModuleHolder<ShardedUnitImpl<ModuleType>> {
 public:
  using torch::nn::ModuleHolder<ShardedUnitImpl<ModuleType>>::ModuleHolder;
};

}  // namespace arc
