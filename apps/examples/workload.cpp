// Canonical workload generation.
#include <arc/apps/examples/workload.h>

#include <arc/core/sha256.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace arc::workload {
namespace {

Data generate() {
  // Class prototypes: a 7x7 grid of 4x4-pixel blocks of +-1.
  int8_t prototype[kClasses][49];
  for (int64_t t = 0; t < kClasses; ++t)
    for (int64_t q = 0; q < 49; ++q)
      prototype[t][q] = (splitmix64(2, static_cast<uint64_t>(t * 49 + q)) >> 63) == 1 ? 1 : -1;
  Data out;
  out.x = torch::empty({kSamples, kFeatures}, torch::kFloat);
  out.y = torch::empty({kSamples}, torch::kLong);
  float* x = out.x.data_ptr<float>();
  int64_t* y = out.y.data_ptr<int64_t>();
  for (int64_t i = 0; i < kSamples; ++i) {
    y[i] = static_cast<int64_t>(splitmix64(1, static_cast<uint64_t>(i)) % kClasses);
    for (int64_t j = 0; j < kFeatures; ++j) {
      const int64_t q = (j / 28 / 4) * 7 + (j % 28) / 4;
      const uint64_t h = splitmix64(3, static_cast<uint64_t>(i * kFeatures + j));
      const auto noise =
          static_cast<int64_t>(((h >> 32) & 255) + ((h >> 40) & 255) + ((h >> 48) & 255) + (h >> 56)) - 510;
      x[i * kFeatures + j] = static_cast<float>(16 * prototype[y[i]][q] + noise) / 256.0f;
    }
  }
  return out;
}

}  // namespace

uint64_t splitmix64(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

const Data& data() {
  static const Data generated = generate();
  return generated;
}

std::vector<int64_t> epoch_order(int64_t size, int64_t epoch) {
  std::vector<uint64_t> keys(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i)
    keys[i] = splitmix64(1000 + static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return keys[a] != keys[b] ? keys[a] < keys[b] : a < b; });
  return order;
}

void init_parameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  int64_t fan_in = 1;
  uint64_t p = 0;
  for (auto& parameter : module.parameters()) {
    if (parameter.dim() >= 2) fan_in = parameter.numel() / parameter.size(0);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    auto values = torch::empty(parameter.sizes(), torch::kFloat);
    float* out = values.data_ptr<float>();
    for (int64_t k = 0; k < values.numel(); ++k) {
      const double u = static_cast<double>(splitmix64(2000 + p, static_cast<uint64_t>(k)) >> 11) * 0x1p-53;
      out[k] = static_cast<float>(bound * (2.0 * u - 1.0));
    }
    parameter.copy_(values);
    ++p;
  }
}

std::string parameter_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  for (const auto& parameter : module.parameters()) {
    const auto values = parameter.detach().to(torch::kCPU, torch::kFloat).contiguous();
    hash.update(values.data_ptr<float>(), static_cast<size_t>(values.numel()) * sizeof(float));
  }
  return hash.hex_digest();
}

}  // namespace arc::workload
