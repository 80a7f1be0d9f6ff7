// CanonicalData: the workload's train/val split, in the epoch order WORKLOAD.md §2 defines.
#pragma once

#include <arc/base/config.h>
#include <arc/data/data_module.h>

namespace arc::examples {

/// Train = samples 0..59,999 in splitmix64 epoch order; val = 60,000..69,999 in order.
/// Config: batch_size (64), val_batch_size (1000), num_workers (0), pin_memory (false: page-locked
/// batches, for asynchronous copies to a GPU).
class CanonicalData : public DataModule {
 public:
  explicit CanonicalData(const Config& config);

  DataSource train_dataloader() override;
  DataSource val_dataloader() override;
  DataSource test_dataloader() override;
  DataSource predict_dataloader() override;

 private:
  int64_t batch_size_;
  int64_t val_batch_size_;
  int64_t num_workers_;
  bool pin_memory_;
};

}  // namespace arc::examples
