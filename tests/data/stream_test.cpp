// Streams (iterable datasets) in the DataLoader: sharding by rank, batching, the end within reach,
// and the position a resume starts from.
#include "support/row_stream.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

using testing::RowStreamDataset;
using testing::RowStreamOptions;

// Rows 0..n-1, each sample a scalar equal to its row.
std::shared_ptr<RowStreamDataset> rows(int64_t n, RowStreamOptions options = {}) {
  return std::make_shared<RowStreamDataset>(std::vector<torch::Tensor>{torch::arange(n, torch::kLong)}, options);
}

// The rows of every batch left in the epoch.
std::vector<std::vector<int64_t>> stream_rows(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  while (auto batch = loader.next()) {
    const auto values = (*batch)[0];
    out.emplace_back(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel());
    EXPECT_EQ(loader.last_indices(), out.back());
  }
  return out;
}

using StreamBatches = std::vector<std::vector<int64_t>>;

TEST(StreamLoader, ShardsByRankAndBatchesInOrder) {
  const auto data = rows(14);
  DataLoader rank0({data, DataLoaderOptions(3)}, 0, 2), rank1({data, DataLoaderOptions(3)}, 1, 2);
  EXPECT_EQ(rank0.num_batches(), kUnknownLength);
  rank0.start();
  rank1.start();
  EXPECT_EQ(stream_rows(rank0), (StreamBatches{{0, 2, 4}, {6, 8, 10}, {12}}));
  EXPECT_EQ(stream_rows(rank1), (StreamBatches{{1, 3, 5}, {7, 9, 11}, {13}}));
  // The samples stack into batches with a first dimension.
  DataLoader one({data, DataLoaderOptions(4).drop_last(true)});
  one.start();
  const auto first = one.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)[0].sizes(), torch::IntArrayRef({4}));
  EXPECT_EQ(stream_rows(one), (StreamBatches{{4, 5, 6, 7}, {8, 9, 10, 11}}));  // drop_last drops {12, 13}
}

TEST(StreamLoader, KnowsTheEndOnceItIsWithinReach) {
  DataLoader loader({rows(10), DataLoaderOptions(2)});
  loader.start();
  EXPECT_EQ(loader.known_end(3), std::nullopt);  // 6 rows read of 10
  EXPECT_EQ(loader.known_end(6), 5);
  loader.next();
  loader.next();
  EXPECT_EQ(loader.known_end(3), 5);
  EXPECT_EQ(stream_rows(loader).size(), 3u);
  // A dataset's count is known from the start.
  DataLoader sized(
      {std::make_shared<TensorDataset>(std::vector<torch::Tensor>{torch::zeros({5})}), DataLoaderOptions(2)});
  EXPECT_EQ(sized.known_end(1), 3);
  EXPECT_TRUE(sized.state_dict().is_null());
}

// state_dict() between batches, the same on every rank, starts a new loader where the old one was:
// by the stream's state (a seek), or by reading again without one; also with another world size.
TEST(StreamLoader, ResumesWhereTheStateSays) {
  for (const bool reports : {true, false}) {
    SCOPED_TRACE(reports ? "stream state" : "re-read");
    const auto data = rows(20, {.reports_state = reports, .seeks = false});
    DataLoader rank0({data, DataLoaderOptions(2)}, 0, 2), rank1({data, DataLoaderOptions(2)}, 1, 2);
    rank0.start();
    rank1.start();
    rank0.next();
    rank1.next();
    rank1.known_end(3);  // reading ahead leaves the state where the batches handed out end
    EXPECT_EQ(rank0.state_dict(), rank1.state_dict());
    EXPECT_EQ(rank0.state_dict().at("position"), 4);
    EXPECT_EQ(rank0.state_dict().at("stream"), reports ? nlohmann::json(4) : nlohmann::json(nullptr));
    const auto state = rank1.state_dict();
    const auto rest = stream_rows(rank1);
    DataLoader again({data, DataLoaderOptions(2)}, 1, 2);
    const int64_t reads_before = data->rows_read;
    again.start(1, state);
    EXPECT_EQ(stream_rows(again), rest);
    // Resuming by state reads from row 4 on; re-reading reads rows 0..3 again too.
    EXPECT_EQ(data->rows_read - reads_before, reports ? 16 : 20);
    DataLoader alone({data, DataLoaderOptions(4)});
    alone.start(1, state);
    EXPECT_EQ(stream_rows(alone), (StreamBatches{{4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}, {16, 17, 18, 19}}));
  }
  // Without a state, batch k of a resumed epoch starts at sample k · batch size · world size.
  DataLoader by_batch({rows(12), DataLoaderOptions(2)}, 1, 2);
  by_batch.start(2);
  EXPECT_EQ(stream_rows(by_batch), (StreamBatches{{9, 11}}));
}

TEST(StreamLoader, SkipsOtherRanksSamplesBySeekingWhereTheStreamCan) {
  const auto seeking = rows(40), reading = rows(40, {.seeks = false});
  for (const auto& data : {seeking, reading}) {
    DataLoader loader({data, DataLoaderOptions(5)}, 3, 4);
    loader.start();
    EXPECT_EQ(stream_rows(loader), (StreamBatches{{3, 7, 11, 15, 19}, {23, 27, 31, 35, 39}}));
  }
  EXPECT_EQ(seeking->rows_read, 10);
  EXPECT_EQ(reading->rows_read, 40);
}

TEST(StreamLoader, AWorkerReadsAheadTheSameBatchesAndStates) {
  const auto data = rows(23, {.rotate_by_epoch = true});
  DataLoader inline_loader({data, DataLoaderOptions(3)}, 1, 2);
  DataLoader worker({data, DataLoaderOptions(3).num_workers(2)}, 1, 2);
  for (auto* loader : {&inline_loader, &worker}) {
    loader->set_epoch(1);
    loader->start();
  }
  while (true) {
    auto a = inline_loader.next(), b = worker.next();
    ASSERT_EQ(a.has_value(), b.has_value());
    if (!a) break;
    EXPECT_TRUE(torch::equal((*a)[0], (*b)[0]));
    EXPECT_EQ(inline_loader.state_dict(), worker.state_dict());
  }
  // Epoch 1 starts at row 1.
  worker.start();
  EXPECT_EQ(worker.next().value()[0][0].item<int64_t>(), 2);
  EXPECT_EQ(worker.known_end(100), 4);
}

TEST(StreamLoader, ErrorsReachTheLoopAtTheirBatch) {
  for (const int64_t workers : {0, 1}) {
    DataLoader loader({rows(10, {.fail_at = 5}), DataLoaderOptions(2).num_workers(workers)});
    loader.start();
    EXPECT_TRUE(loader.next().has_value());
    EXPECT_TRUE(loader.next().has_value());
    EXPECT_THROW(
        {
          try {
            loader.next();
          } catch (const std::runtime_error& error) {
            EXPECT_STREQ(error.what(), "row stream fails at row 5");
            throw;
          }
        },
        std::runtime_error);
  }
}

TEST(StreamLoader, OptionsThatDoNotApplyToAStreamAreErrors) {
  const auto data = rows(4);
  try {
    DataLoader loader({data, DataLoaderOptions(2).shuffle(true)});
    FAIL() << "shuffle was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("shuffle in the dataset's open(epoch)"), std::string::npos)
        << error.what();
  }
  // A stream whose state() says something but that cannot go back there.
  struct NoLoad : IterableDataset {
    struct Stream : SampleStream {
      std::optional<Batch> next() override { return std::nullopt; }
      nlohmann::json state() const override { return 7; }
    };
    std::unique_ptr<SampleStream> open(int64_t) const override { return std::make_unique<Stream>(); }
  };
  DataLoader loader({std::make_shared<NoLoad>(), DataLoaderOptions(2)});
  try {
    loader.start(0, {{"position", 7}, {"stream", 7}});
    FAIL() << "a state without load_state was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("override SampleStream::load_state"), std::string::npos) << error.what();
  }
}

TEST(Collate, StacksEachTensorOfTheSamples) {
  const auto scalar = [](double value) { return torch::full({}, value); };
  const auto batch = collate({Batch{torch::ones({2}), scalar(1)}.set("w", scalar(0.5)),
                              Batch{torch::zeros({2}), scalar(2)}.set("w", scalar(1.5))});
  EXPECT_TRUE(torch::equal(batch[0], torch::stack({torch::ones({2}), torch::zeros({2})})));
  EXPECT_EQ(batch[1].sizes(), torch::IntArrayRef({2}));
  EXPECT_EQ(batch[1][1].item<double>(), 2.0);
  EXPECT_EQ(batch["w"][0].item<double>(), 0.5);
  EXPECT_THROW(collate({Batch{torch::ones({2})}, Batch{torch::ones({2}), torch::ones({1})}}), Error);
}

}  // namespace
}  // namespace arc
