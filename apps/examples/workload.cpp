// Canonical workload generation.
#include <arc/apps/examples/workload.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace arc::workload {
namespace {

// The finishing steps of splitmix64, for a state already advanced to seed + (k + 1) * gamma.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;

// The features of samples [0, rows). Each pixel's noise is independent of the others, so the inner
// loop vectorises; 64-bit multiplies need AVX-512 (or AVX2, emulated) to pay, hence one clone per
// x86 level, chosen at load time. The arithmetic is integral, so every clone gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void fill_features(float* x, const int64_t* y, const int32_t (*prototype)[kFeatures], int64_t rows) {
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t* row = prototype[y[i]];
    // Stream 3's state for k = i * 784 + j advances by gamma per pixel.
    const uint64_t first = 3 + (static_cast<uint64_t>(i * kFeatures) + 1) * kGamma;
    for (int64_t j = 0; j < kFeatures; ++j) {
      const uint64_t h = mix(first + static_cast<uint64_t>(j) * kGamma);
      const auto noise =
          static_cast<int32_t>(((h >> 32) & 255) + ((h >> 40) & 255) + ((h >> 48) & 255) + (h >> 56)) - 510;
      x[i * kFeatures + j] = static_cast<float>(row[j] + noise) / 256.0f;
    }
  }
}

Data generate() {
  // Class prototypes: a 7x7 grid of 4x4-pixel blocks of +-16, laid out per pixel.
  int32_t prototype[kClasses][kFeatures];
  for (int64_t t = 0; t < kClasses; ++t)
    for (int64_t j = 0; j < kFeatures; ++j) {
      const int64_t q = (j / 28 / 4) * 7 + (j % 28) / 4;
      prototype[t][j] = (splitmix64(2, static_cast<uint64_t>(t * 49 + q)) >> 63) == 1 ? 16 : -16;
    }
  Data out;
  out.x = torch::empty({kSamples, kFeatures}, torch::kFloat);
  out.y = torch::empty({kSamples}, torch::kLong);
  int64_t* y = out.y.data_ptr<int64_t>();
  for (int64_t i = 0; i < kSamples; ++i)
    y[i] = static_cast<int64_t>(splitmix64(1, static_cast<uint64_t>(i)) % kClasses);
  fill_features(out.x.data_ptr<float>(), y, prototype, kSamples);
  return out;
}

}  // namespace

uint64_t splitmix64(uint64_t seed, uint64_t k) { return mix(seed + (k + 1) * kGamma); }

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

}  // namespace arc::workload
