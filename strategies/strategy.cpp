// Strategy defaults, the strategy registry and "auto" resolution.
#include <arc/strategies/strategy.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/ddp_spawn_strategy.h>
#include <arc/strategies/ddp_strategy.h>
#include <arc/strategies/elastic_strategy.h>
#include <arc/strategies/single_device_strategy.h>

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <algorithm>

namespace arc {

void LaunchRequest::check(const cluster::ClusterEnvironment& environment) const {
  environment.validate(devices_auto ? environment.local_world_size() : processes, num_nodes);
}

void Strategy::setup_module(torch::nn::Module& module) { module.to(root_device()); }

void Strategy::backward(const torch::Tensor& loss) { loss.backward(); }

bool Strategy::optimizer_step(torch::optim::Optimizer&, const std::function<bool()>& step) { return step(); }

double Strategy::clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm, 2.0);
}

void Strategy::barrier() {
  if (auto* group = collectives()) group->barrier();
}

void Strategy::broadcast(torch::Tensor& tensor, int64_t src) {
  if (auto* group = collectives()) group->broadcast(tensor, src);
}

std::string Strategy::broadcast(const std::string& text, int64_t src) {
  auto* group = collectives();
  return group == nullptr ? text : broadcast_text(*group, text, src);
}

torch::Tensor Strategy::all_reduce(const torch::Tensor& tensor, Reduce op) {
  auto out = tensor.detach().clone();
  all_reduce_(out, op);
  return out;
}

void Strategy::all_reduce_(torch::Tensor& tensor, Reduce op) {
  auto* group = collectives();
  if (group == nullptr) return;
  // A strided tensor goes through a contiguous copy; a buffer from reduce_buffer is reduced where it lies.
  const bool contiguous = tensor.is_contiguous();
  auto work = contiguous ? tensor.detach() : tensor.detach().contiguous();
  group->all_reduce(work, op).wait();
  if (contiguous) return;
  const c10::InferenceMode writable(tensor.is_inference());
  tensor.detach().copy_(work);
}

torch::Tensor Strategy::reduce_buffer(torch::IntArrayRef sizes, torch::TensorOptions options) {
  int64_t numel = 1;
  for (const auto size : sizes) {
    ARC_CHECK(size >= 0, "reduce_buffer: size ", size, " in ", sizes, " is negative; give every size as 0 or more");
    numel *= size;
  }
  if (!options.has_device()) options = options.device(root_device());
  auto* group = collectives();
  if (group == nullptr) return torch::zeros(sizes, options);
  return group->reduce_buffer(numel, options).view(sizes);
}

std::map<std::string, torch::Tensor> Strategy::all_reduce(const std::map<std::string, torch::Tensor>& values,
                                                          Reduce op) {
  if (values.empty()) return values;
  std::vector<torch::Tensor> flat;
  std::vector<std::string> names;
  for (const auto& [name, value] : values) {
    flat.push_back(value.detach().reshape({-1}).to(torch::kDouble));
    names.push_back(name);
  }
  // After the values, names_hash and its negation. Reduced by max or min, the pair is this rank's own
  // only where every rank's is; by a sum or mean (world_size times it, or it), at least the ranks
  // whose hash is off the mean see a difference, and their failure ends the others (two ranks: both).
  const double hash = names_hash(names);
  flat.push_back(torch::tensor({hash, -hash}, torch::kDouble).to(flat.front().device()));
  const auto reduced = all_reduce(torch::cat(flat), op);
  const double times = op == Reduce::sum ? static_cast<double>(world_size()) : 1.0;
  const auto pair = reduced.narrow(0, reduced.numel() - 2, 2).cpu();
  const auto* check = pair.data_ptr<double>();
  ARC_CHECK(check[0] == times * hash && check[1] == -times * hash,
            "all_reduce of a map: another rank's map has other names than this rank's (", join(names),
            "); every rank must reduce the same names: reduce a value whose name differs by rank with all_gather");
  std::map<std::string, torch::Tensor> out;
  int64_t offset = 0;
  for (const auto& [name, value] : values) {
    out[name] = reduced.narrow(0, offset, value.numel()).view(value.sizes()).to(value.scalar_type());
    offset += value.numel();
  }
  return out;
}

namespace {

constexpr int64_t kShownDims = 8;

// The shape and type of `tensor` as a tensor of fixed length, so that the ranks can compare theirs
// with one small gather: dims, type, numel, the first kShownDims sizes, a hash of all of them.
torch::Tensor signature_of(const torch::Tensor& tensor) {
  std::vector<int64_t> signature{tensor.dim(), static_cast<int64_t>(tensor.scalar_type()), tensor.numel()};
  uint64_t hash = 14695981039346656037ull;
  for (int64_t d = 0; d < tensor.dim(); ++d) hash = (hash ^ static_cast<uint64_t>(tensor.size(d))) * 1099511628211ull;
  for (int64_t d = 0; d < kShownDims; ++d) signature.push_back(d < tensor.dim() ? tensor.size(d) : -1);
  signature.push_back(static_cast<int64_t>(hash));
  return torch::tensor(signature, torch::kLong);
}

// "[4, 3] Float" from a signature.
std::string describe(const torch::Tensor& signature) {
  const auto* s = signature.data_ptr<int64_t>();
  std::string sizes;
  for (int64_t d = 0; d < std::min(s[0], kShownDims); ++d) sizes += (d > 0 ? ", " : "") + std::to_string(s[3 + d]);
  if (s[0] > kShownDims) sizes += ", ... (" + std::to_string(s[0]) + " dims, " + std::to_string(s[2]) + " elements)";
  return "[" + sizes + "] " + c10::toString(static_cast<c10::ScalarType>(s[1]));
}

}  // namespace

std::vector<torch::Tensor> Strategy::all_gather(const torch::Tensor& tensor) {
  auto* group = collectives();
  if (group == nullptr) return {tensor.detach().clone()};
  // Tensors of different shapes would be read past their ends: every rank compares them first and
  // fails alike, naming each rank's.
  const auto signatures = group->all_gather(signature_of(tensor));
  const bool same = std::all_of(signatures.begin(), signatures.end(),
                                [&](const torch::Tensor& signature) { return torch::equal(signature, signatures[0]); });
  if (!same) {
    std::string shapes;
    for (size_t r = 0; r < signatures.size(); ++r)
      shapes += (r > 0 ? ", rank " : "rank ") + std::to_string(r) + " " + describe(signatures[r]);
    ARC_FAIL("all_gather: the ranks' tensors differ (", shapes, "); every rank must gather a tensor of one shape ",
             "and type: pad them to the largest, and gather their lengths too");
  }
  return group->all_gather(tensor.detach());
}

std::chrono::milliseconds DDPStrategyOptions::timeout_duration() const {
  return std::chrono::milliseconds(static_cast<int64_t>(timeout_ * 1000));
}

std::chrono::milliseconds DDPStrategyOptions::collective_timeout_duration() const {
  return std::min(timeout_duration(), std::chrono::milliseconds(static_cast<int64_t>(collective_timeout_ * 1000)));
}

void DDPStrategyOptions::validate() const {
  ARC_CHECK(timeout_ > 0, "timeout must be > 0 seconds, got ", timeout_);
  ARC_CHECK(collective_timeout_ > 0, "collective_timeout must be > 0 seconds, got ", collective_timeout_);
  ARC_CHECK(first_bucket_mb_ > 0, "first_bucket_mb must be > 0, got ", first_bucket_mb_);
  ARC_CHECK(bucket_cap_mb_ > 0, "bucket_cap_mb must be > 0, got ", bucket_cap_mb_);
  check_choice("process_group_backend", process_group_backend_, {"auto", "nccl", "gloo"});
  check_choice("sharding_strategy", sharding_strategy_,
               {"auto", "FULL_SHARD", "HYBRID_SHARD", "SHARD_GRAD_OP", "SHARD_OPTIMIZER", "NO_SHARD"});
  check_choice("state_dict_type", state_dict_type_, {"full", "sharded"});
  check_choice("backward_prefetch", backward_prefetch_, {"BACKWARD_PRE", "BACKWARD_POST", "NONE"});
}

Registry<Strategy>& strategy_registry() {
  static Registry<Strategy> registry = [] {
    Registry<Strategy> r("strategy");
    r.add_class<SingleDeviceStrategy>("single_device");
    r.add_class<DDPStrategy>("ddp");
    r.add_class<DDPSpawnStrategy>("ddp_spawn");
    r.add_class<ElasticStrategy>("elastic");
    // ddp under a launcher, ddp_spawn without one, for one process too.
    r.add("fsdp", [] {
      std::shared_ptr<DDPStrategy> strategy;
      if (cluster::auto_strategy(2, 1) == "ddp") {
        strategy = std::make_shared<DDPStrategy>();
      } else {
        strategy = std::make_shared<DDPSpawnStrategy>();
      }
      strategy->shard();
      return strategy;
    });
    return r;
  }();
  return registry;
}

std::shared_ptr<Strategy> resolve_strategy(const std::string& name, int64_t devices, int64_t num_nodes) {
  const std::string plain = cluster::parse_strategy_name(name).name;
  return strategy_registry().create(plain == "auto" ? cluster::auto_strategy(devices, num_nodes) : plain);
}

}  // namespace arc
