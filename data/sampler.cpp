// Built-in samplers and rank sharding.
#include <arc/data/sampler.h>

#include <arc/base/error.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numeric>

namespace arc {

std::vector<int64_t> SequentialSampler::order(int64_t dataset_size, int64_t) const {
  std::vector<int64_t> out(static_cast<size_t>(dataset_size));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

std::vector<int64_t> RandomSampler::order(int64_t dataset_size, int64_t epoch) const {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch));
  const auto perm = torch::randperm(dataset_size, generator, torch::kLong);
  const int64_t* data = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + dataset_size);
}

std::vector<int64_t> FunctionSampler::order(int64_t dataset_size, int64_t epoch) const {
  auto out = fn_(dataset_size, epoch);
  for (const int64_t index : out)
    ARC_CHECK(index >= 0 && index < dataset_size, "sampler returned index ", index, " outside the dataset of ",
              dataset_size, " samples");
  return out;
}

std::vector<int64_t> shard(const std::vector<int64_t>& order, int64_t rank, int64_t world, bool pad) {
  ARC_CHECK(world >= 1 && rank >= 0 && rank < world, "cannot shard for rank ", rank, " of world size ", world,
            "; ranks run from 0 to world size - 1, so check RANK and WORLD_SIZE");
  const auto total = static_cast<int64_t>(order.size());
  const int64_t per_rank = pad ? (total + world - 1) / world : total / world;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < per_rank; ++i) {
    const int64_t position = rank + i * world;
    if (position < total) {
      out.push_back(order[static_cast<size_t>(position)]);
    } else if (total > 0) {
      out.push_back(order[static_cast<size_t>(position % total)]);
    }
  }
  return out;
}

}  // namespace arc
