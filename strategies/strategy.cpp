// Strategy defaults, the strategy registry and "auto" resolution.
#include <arc/strategies/strategy.h>

#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/ddp_spawn_strategy.h>
#include <arc/strategies/ddp_strategy.h>
#include <arc/strategies/elastic_strategy.h>
#include <arc/strategies/single_device_strategy.h>

#include <torch/torch.h>

#include <cstring>

namespace arc {

void LaunchRequest::check(const cluster::ClusterEnvironment& environment) const {
  environment.validate(devices_auto ? environment.local_world_size() : processes, num_nodes);
}

void Strategy::setup_module(torch::nn::Module& module) { module.to(root_device()); }

void Strategy::backward(const torch::Tensor& loss) { loss.backward(); }

void Strategy::barrier() {
  if (auto* group = collectives()) group->barrier();
}

void Strategy::broadcast(torch::Tensor& tensor, int64_t src) {
  if (auto* group = collectives()) group->broadcast(tensor, src);
}

std::string Strategy::broadcast(const std::string& text, int64_t src) {
  auto* group = collectives();
  if (group == nullptr) return text;
  auto length = torch::tensor({static_cast<int64_t>(text.size())});
  group->broadcast(length, src);
  auto bytes = torch::zeros({length.item<int64_t>()}, torch::kUInt8);
  if (global_rank() == src) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  group->broadcast(bytes, src);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
}

torch::Tensor Strategy::all_reduce(const torch::Tensor& tensor, Reduce op) {
  auto out = tensor.detach().clone();
  auto* group = collectives();
  if (group == nullptr) return out;
  group->all_reduce(out, op).wait();
  return out;
}

std::map<std::string, torch::Tensor> Strategy::all_reduce(const std::map<std::string, torch::Tensor>& values,
                                                          Reduce op) {
  if (values.empty()) return values;
  std::vector<torch::Tensor> flat;
  for (const auto& [name, value] : values) flat.push_back(value.detach().reshape({-1}).to(torch::kDouble));
  const auto reduced = all_reduce(torch::cat(flat), op);
  std::map<std::string, torch::Tensor> out;
  int64_t offset = 0;
  for (const auto& [name, value] : values) {
    out[name] = reduced.narrow(0, offset, value.numel()).view(value.sizes()).to(value.scalar_type());
    offset += value.numel();
  }
  return out;
}

std::vector<torch::Tensor> Strategy::all_gather(const torch::Tensor& tensor) {
  auto* group = collectives();
  if (group == nullptr) return {tensor.detach().clone()};
  return group->all_gather(tensor.detach());
}

Registry<Strategy>& strategy_registry() {
  static Registry<Strategy> registry = [] {
    Registry<Strategy> r("strategy");
    r.add("single_device", [] { return std::make_shared<SingleDeviceStrategy>(); });
    r.add("ddp", [] { return std::make_shared<DDPStrategy>(); });
    r.add("ddp_spawn", [] { return std::make_shared<DDPSpawnStrategy>(); });
    r.add("elastic", [] { return std::make_shared<ElasticStrategy>(); });
    return r;
  }();
  return registry;
}

std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices, int64_t num_nodes) {
  return strategy_registry().create(name == "auto" ? cluster::auto_strategy(devices, num_nodes) : name);
}

}  // namespace arc
