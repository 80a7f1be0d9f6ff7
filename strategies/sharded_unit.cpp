// ShardedUnitBase.
#include <arc/strategies/sharded_unit.h>

#include <ostream>

namespace arc {
namespace {

thread_local UnitBuilder* current_builder = nullptr;

}  // namespace

void with_unit_builder(UnitBuilder& builder, const std::function<void()>& fn) {
  struct Restore {
    UnitBuilder* previous;
    ~Restore() { current_builder = previous; }
  } restore{current_builder};
  current_builder = &builder;
  fn();
}

void ShardedUnitBase::train(bool on) {
  torch::nn::Module::train(on);
  wrapped().train(on);
}

void ShardedUnitBase::pretty_print(std::ostream& stream) const {
  stream << "arc::ShardedUnit(";
  wrapped().pretty_print(stream);
  stream << ")";
}

void ShardedUnitBase::adopt(torch::nn::Module& module) {
  for (const auto& child : module.named_children()) register_module(child.key(), child.value());
  for (const auto& parameter : module.named_parameters(false))
    register_parameter(parameter.key(), parameter.value(), parameter.value().requires_grad());
  for (const auto& buffer : module.named_buffers(false)) register_buffer(buffer.key(), buffer.value());
  if (current_builder != nullptr) current_builder->built(*this);
}

void ShardedUnitBase::before_forward() {
  if (sharding_) sharding_->gather_for_forward();
}

void ShardedUnitBase::release_after_failure() {
  if (sharding_) sharding_->release();
}

void ShardedUnitBase::after_forward(const std::vector<torch::Tensor>& outputs) {
  if (!sharding_) return;
  const std::weak_ptr<UnitSharding> sharding = sharding_;
  for (const auto& output : outputs)
    if (output.defined() && output.requires_grad())
      output.register_hook([sharding](const torch::Tensor&) {
        if (const auto alive = sharding.lock()) alive->gather_for_backward();
      });
  sharding_->release();
}

}  // namespace arc
