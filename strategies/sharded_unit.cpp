// ShardedUnitBase.
#include <arc/strategies/sharded_unit.h>

#include <ostream>

namespace arc {

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
}

void ShardedUnitBase::before_forward() {
  if (sharding_) sharding_->gather();
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
