#include <arc/base/error.h>
#include <arc/data/data_loader.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

namespace arc {
namespace {

std::shared_ptr<Dataset> numbers(int64_t n) {
  return std::make_shared<TensorDataset>(std::vector<torch::Tensor>{torch::arange(n, torch::kLong)});
}

std::vector<int64_t> drain(DataLoader& loader) {
  std::vector<int64_t> out;
  while (auto batch = loader.next()) {
    const auto values = (*batch)[0];
    for (int64_t i = 0; i < values.size(0); ++i) out.push_back(values[i].item<int64_t>());
  }
  return out;
}

TEST(DataLoader, SequentialBatchesWithShortLastBatch) {
  DataLoader loader({numbers(10), DataLoaderOptions(4)});
  EXPECT_EQ(loader.num_batches(), 3);
  loader.start();
  std::vector<int64_t> sizes;
  while (auto batch = loader.next()) sizes.push_back(batch->batch_size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
}

// With CUDA the batches come page-locked (with workers too); without, the option is ignored.
TEST(DataLoader, PinMemoryPinsBatchesWhenCudaIsPresent) {
  for (const int64_t workers : {0, 2}) {
    DataLoader loader({numbers(10), DataLoaderOptions(4).pin_memory(true).num_workers(workers)});
    EXPECT_EQ(loader.pins_memory(), torch::cuda::is_available());
    loader.start();
    std::vector<int64_t> seen;
    while (auto batch = loader.next()) {
      EXPECT_EQ((*batch)[0].is_pinned(), torch::cuda::is_available());
      for (int64_t i = 0; i < (*batch)[0].size(0); ++i) seen.push_back((*batch)[0][i].item<int64_t>());
    }
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: pinned batches were only checked to be off";
}

TEST(DataLoader, NextBeforeStartIsAnError) {
  DataLoader loader({numbers(10), DataLoaderOptions(4)});
  try {
    loader.next();
    ADD_FAILURE() << "next() before start() should throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("call set_epoch(epoch) and start()"), std::string::npos) << error.what();
  }
  loader.start();
  EXPECT_TRUE(loader.next().has_value());
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  DataLoader loader({numbers(10), DataLoaderOptions(4).drop_last(true)});
  EXPECT_EQ(loader.num_batches(), 2);
}

TEST(DataLoader, ShuffleChangesWithEpochAndIsReproducible) {
  DataLoader a({numbers(50), DataLoaderOptions(8).shuffle(true)}, 0, 1, 3);
  DataLoader b({numbers(50), DataLoaderOptions(8).shuffle(true)}, 0, 1, 3);
  a.start();
  b.start();
  const auto first = drain(a);
  EXPECT_EQ(first, drain(b));
  a.set_epoch(1);
  a.start();
  const auto second = drain(a);
  EXPECT_NE(first, second);
  EXPECT_EQ(std::set<int64_t>(second.begin(), second.end()).size(), 50u);
}

TEST(DataLoader, ShardsCoverEverySampleOnceAcrossRanks) {
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader({numbers(12), DataLoaderOptions(2).shuffle(true)}, rank, 3, 5);
    loader.start();
    for (const int64_t value : drain(loader)) seen.insert(value);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 12u);
}

TEST(DataLoader, UnevenShardsArePaddedOrDropped) {
  EXPECT_EQ(shard({0, 1, 2, 3, 4}, 1, 2, true), (std::vector<int64_t>{1, 3, 0}));
  EXPECT_EQ(shard({0, 1, 2, 3, 4}, 1, 2, false), (std::vector<int64_t>{1, 3}));
}

TEST(DataLoader, WorkersDeliverTheSameBatchesInOrder) {
  DataLoader plain({numbers(101), DataLoaderOptions(7).shuffle(true)}, 0, 1, 9);
  DataLoader prefetched({numbers(101), DataLoaderOptions(7).shuffle(true).num_workers(3)}, 0, 1, 9);
  plain.start();
  prefetched.start();
  EXPECT_EQ(drain(plain), drain(prefetched));
}

TEST(DataLoader, StartsMidEpochAtTheRequestedBatch) {
  DataLoader loader({numbers(10), DataLoaderOptions(3).num_workers(2)});
  loader.start(2);
  EXPECT_EQ(drain(loader), (std::vector<int64_t>{6, 7, 8, 9}));
  EXPECT_EQ(loader.position(), 4);
  EXPECT_THROW(loader.start(5), Error);
}

class FailingDataset : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    if (indices.front() >= 4) throw Error("sample 4 is corrupt");
    return Batch{torch::zeros({static_cast<int64_t>(indices.size())})};
  }
};

TEST(DataLoader, WorkerErrorsReachTheLoop) {
  DataLoader loader({std::make_shared<FailingDataset>(), DataLoaderOptions(2).num_workers(2)});
  loader.start();
  EXPECT_TRUE(loader.next().has_value());
  EXPECT_TRUE(loader.next().has_value());
  EXPECT_THROW(loader.next(), Error);
}

TEST(DataLoader, FunctionSamplerDefinesTheOrder) {
  auto reversed = std::make_shared<FunctionSampler>([](int64_t n, int64_t) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = n - 1 - i;
    return order;
  });
  DataLoader loader({numbers(5), DataLoaderOptions(2), reversed});
  loader.start();
  EXPECT_EQ(drain(loader), (std::vector<int64_t>{4, 3, 2, 1, 0}));
}

// A torch::data dataset of (i, 2i) examples.
class Doubling : public torch::data::datasets::Dataset<Doubling> {
 public:
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {torch::full({2}, i), torch::scalar_tensor(2 * i)};
  }
  torch::optional<size_t> size() const override { return 6; }
};

TEST(DataLoader, TorchDatasetsWorkThroughTheAdapter) {
  DataLoader loader({from_torch(Doubling()), DataLoaderOptions(4)});
  loader.start();
  auto batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[0].sizes(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ((*batch)[1][3].item<int64_t>(), 6);
}

TEST(DataLoader, BadOptionsAreErrors) {
  EXPECT_THROW(DataLoader({numbers(4), DataLoaderOptions(0)}), Error);
  EXPECT_THROW(DataLoader({numbers(4), DataLoaderOptions(1).num_workers(-1)}), Error);
}

}  // namespace
}  // namespace arc
