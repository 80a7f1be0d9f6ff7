// The canonical benchmark workload of shared/WORKLOAD.md, generated bit for bit without torch's
// RNG: data, epoch order and initial weights all come from splitmix64.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace arc::workload {

constexpr int64_t kSamples = 70000;
constexpr int64_t kTrainSamples = 60000;
constexpr int64_t kFeatures = 784;
constexpr int64_t kClasses = 10;

/// The k-th output of the splitmix64 stream `seed`.
uint64_t splitmix64(uint64_t seed, uint64_t k);

/// X [70000, 784] float32 and Y [70000] int64, generated once per process.
struct Data {
  torch::Tensor x;
  torch::Tensor y;
};
const Data& data();

/// Training order of epoch `epoch`: argsort of splitmix64(1000 + epoch, i), ties by i.
std::vector<int64_t> epoch_order(int64_t size, int64_t epoch);

/// Sets every parameter as WORKLOAD.md §4: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from stream
/// 2000 + p. Weights give fan_in = numel / out; a bias takes its layer's weight's fan_in.
void init_parameters(torch::nn::Module& module);

}  // namespace arc::workload
