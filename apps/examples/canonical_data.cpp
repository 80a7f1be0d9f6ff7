// CanonicalData.
#include <arc/apps/examples/canonical_data.h>

#include <arc/apps/examples/workload.h>
#include <arc/core/module_registry.h>

#include <torch/torch.h>

namespace arc::examples {
namespace {

std::shared_ptr<Dataset> split(int64_t begin, int64_t end) {
  const auto& all = workload::data();
  return std::make_shared<TensorDataset>(
      std::vector<torch::Tensor>{all.x.slice(0, begin, end), all.y.slice(0, begin, end)});
}

}  // namespace

CanonicalData::CanonicalData(const Config& config)
    : batch_size_(config.get<int64_t>("batch_size", 64)),
      val_batch_size_(config.get<int64_t>("val_batch_size", 1000)),
      num_workers_(config.get<int64_t>("num_workers", 0)),
      pin_memory_(config.get<bool>("pin_memory", false)) {
  ARC_CHECK(batch_size_ >= 1, "data.batch_size must be >= 1, got ", batch_size_);
  ARC_CHECK(val_batch_size_ >= 1, "data.val_batch_size must be >= 1, got ", val_batch_size_);
  ARC_CHECK(num_workers_ >= 0, "data.num_workers must be >= 0, got ", num_workers_);
}

DataSource CanonicalData::train_dataloader() {
  return {split(0, workload::kTrainSamples),
          DataLoaderOptions(batch_size_).num_workers(num_workers_).pin_memory(pin_memory_),
          std::make_shared<FunctionSampler>(workload::epoch_order)};
}

DataSource CanonicalData::val_dataloader() {
  return {split(workload::kTrainSamples, workload::kSamples),
          DataLoaderOptions(val_batch_size_).num_workers(num_workers_).pin_memory(pin_memory_)};
}

DataSource CanonicalData::test_dataloader() { return val_dataloader(); }

DataSource CanonicalData::predict_dataloader() { return val_dataloader(); }

ARC_REGISTER_DATA_MODULE(CanonicalData, "canonical");

}  // namespace arc::examples
