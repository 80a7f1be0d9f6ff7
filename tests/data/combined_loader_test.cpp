// CombinedLoader: several sources read side by side, a part of each batch per source, with
// Lightning's modes.
#include "support/errors.h"
#include "support/row_stream.h"

#include <arc/base/error.h>
#include <arc/data/data_loader.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

namespace arc {
namespace {

using testing::error_of;

// Samples first, first + 1, ... (n of them) as a dataset of one tensor.
DataSource numbered(int64_t first, int64_t n, DataLoaderOptions options) {
  return {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{torch::arange(first, first + n, torch::kLong)}),
          options};
}

std::vector<int64_t> values_of(const Batch& batch) {
  const auto tensor = batch[0];
  return std::vector<int64_t>(tensor.data_ptr<int64_t>(), tensor.data_ptr<int64_t>() + tensor.numel());
}

// Each batch's parts as {name: values}, in order; an absent part is left out.
using Parts = std::vector<std::map<std::string, std::vector<int64_t>>>;
Parts drain_parts(DataLoader& loader) {
  Parts out;
  while (auto batch = loader.next()) {
    auto& parts = out.emplace_back();
    for (const auto& name : batch->part_names()) parts[name] = values_of(batch->part(name));
  }
  return out;
}

// "a": 10 samples in batches of 4 (3 batches), "b": 4 samples in batches of 2 (2 batches).
CombinedLoader two_sources(const std::string& mode) {
  return CombinedLoader({{"a", numbered(0, 10, DataLoaderOptions(4))}, {"b", numbered(100, 4, DataLoaderOptions(2))}},
                        mode);
}

TEST(CombinedLoader, ModesEndTheEpochAsLightningsDo) {
  const std::vector<int64_t> a0{0, 1, 2, 3}, a1{4, 5, 6, 7}, a2{8, 9}, b0{100, 101}, b1{102, 103};
  DataLoader cycle(two_sources("max_size_cycle"));
  EXPECT_EQ(cycle.num_batches(), 3);
  cycle.start();
  EXPECT_EQ(drain_parts(cycle), (Parts{{{"a", a0}, {"b", b0}}, {{"a", a1}, {"b", b1}}, {{"a", a2}, {"b", b0}}}));
  DataLoader shortest(two_sources("min_size"));
  EXPECT_EQ(shortest.num_batches(), 2);
  shortest.start();
  EXPECT_EQ(drain_parts(shortest), (Parts{{{"a", a0}, {"b", b0}}, {{"a", a1}, {"b", b1}}}));
  DataLoader longest(two_sources("max_size"));
  EXPECT_EQ(longest.num_batches(), 3);
  longest.start();
  EXPECT_EQ(drain_parts(longest), (Parts{{{"a", a0}, {"b", b0}}, {{"a", a1}, {"b", b1}}, {{"a", a2}}}));
  // The default is Lightning's for training.
  EXPECT_EQ(CombinedLoader({{"a", numbered(0, 2, DataLoaderOptions(1))}}).mode(), "max_size_cycle");
}

// A resumed epoch starts at any batch and gives what the uninterrupted epoch gave from there, with
// each source shuffled (its own order, every epoch another) and read ahead by workers.
TEST(CombinedLoader, StartsAtAnyBatchOfAnyEpochAsTheWholeEpochWent) {
  for (const std::string mode : {"max_size_cycle", "min_size", "max_size"}) {
    SCOPED_TRACE(mode);
    const auto sources = [&] {
      return CombinedLoader({{"a", numbered(0, 11, DataLoaderOptions(2).shuffle(true).num_workers(2))},
                             {"b", numbered(100, 5, DataLoaderOptions(2).shuffle(true))}},
                            mode);
    };
    for (const int64_t epoch : {0, 1}) {
      DataLoader whole(sources(), 0, 1, 7);
      whole.set_epoch(epoch);
      whole.start();
      const Parts expected = drain_parts(whole);
      ASSERT_EQ(static_cast<int64_t>(expected.size()), whole.num_batches());
      for (int64_t first = 0; first <= whole.num_batches(); ++first) {
        DataLoader resumed(sources(), 0, 1, 7);
        resumed.set_epoch(epoch);
        resumed.start(first);
        EXPECT_EQ(drain_parts(resumed), Parts(expected.begin() + first, expected.end())) << "from batch " << first;
      }
    }
  }
  DataLoader shuffled(CombinedLoader({{"a", numbered(0, 8, DataLoaderOptions(8).shuffle(true))},
                                      {"b", numbered(0, 8, DataLoaderOptions(8).shuffle(true))}}));
  shuffled.start();
  const auto batch = shuffled.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_NE(values_of(batch->part("a")), values_of(batch->part("b"))) << "two sources of one size are shuffled apart";
  EXPECT_THROW(shuffled.start(2), Error);
}

// Under DDP each source is sharded by rank as it would be alone: together the ranks read every
// sample of each source once per round.
TEST(CombinedLoader, ShardsEachSourceByRank) {
  std::map<std::string, std::multiset<int64_t>> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader loader(CombinedLoader({{"a", numbered(0, 12, DataLoaderOptions(3).shuffle(true))},
                                      {"b", numbered(100, 4, DataLoaderOptions(2))}},
                                     "min_size"),
                      rank, 2, 5);
    EXPECT_EQ(loader.num_batches(), 1);  // b: 2 samples a rank, one batch; a: 6 samples, two batches
    loader.start();
    for (const auto& parts : drain_parts(loader))
      for (const auto& [name, part] : parts) seen[name].insert(part.begin(), part.end());
  }
  EXPECT_EQ(seen["b"], (std::multiset<int64_t>{100, 101, 102, 103}));
  EXPECT_EQ(seen["a"].size(), 6u);
  EXPECT_EQ(std::set<int64_t>(seen["a"].begin(), seen["a"].end()).size(), 6u);
}

TEST(CombinedLoader, BadSourcesAndModesAreErrorsThatSayTheFix) {
  const auto source = numbered(0, 4, DataLoaderOptions(2));
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"a", source}}, "sequential");
            }).find("pass validation, test or predict"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"a", source}}, "max_size_cylce");
            }).find("did you mean 'max_size_cycle'"),
            std::string::npos);
  EXPECT_NE(error_of([] { CombinedLoader({}); }).find("got no sources"), std::string::npos);
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"a", source}, {"a", source}});
            }).find("two sources named 'a'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { CombinedLoader({{"", source}}); }).find("empty name"), std::string::npos);
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"a", DataSource()}});
            }).find("source 'a' has no dataset"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"s", testing::tiny_stream(4, 2)}});
            }).find("source 's' is a stream"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              CombinedLoader({{"c", CombinedLoader({{"a", source}})}});
            }).find("is a CombinedLoader itself"),
            std::string::npos);
  DataSource both = CombinedLoader({{"a", source}});
  both.dataset = source.dataset;
  EXPECT_NE(error_of([&] {
              DataLoader loader(both);
            }).find("a DataSource has a dataset and a CombinedLoader set, but a source reads one of them"),
            std::string::npos);
  // max_size_cycle cannot start over a source that has no batch; max_size leaves its part out.
  const auto empty = numbered(0, 0, DataLoaderOptions(2));
  DataLoader cycle(CombinedLoader({{"a", source}, {"none", empty}}));
  EXPECT_NE(error_of([&] { cycle.start(); }).find("source 'none' has no batch for rank 0"), std::string::npos);
  DataLoader longest(CombinedLoader({{"a", source}, {"none", empty}}, "max_size"));
  longest.start();
  EXPECT_EQ(drain_parts(longest), (Parts{{{"a", {0, 1}}}, {{"a", {2, 3}}}}));
}

}  // namespace
}  // namespace arc
