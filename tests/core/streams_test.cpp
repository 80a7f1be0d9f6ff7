// Fit, validate, test and predict on streams (iterable datasets of unknown length), issue 18 row 5.
#include "support/row_stream.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

using testing::quiet;
using testing::RowStreamDataset;
using testing::tiny_data;
using testing::tiny_stream;
using testing::TinyModule;
using testing::weights_of;

// Notes how many batches the Trainer counts while it runs.
class Counting : public TinyModule {
 public:
  torch::Tensor training_step(Batch& batch, int64_t batch_idx) override {
    seen_counts.push_back(trainer().num_training_batches());
    return TinyModule::training_step(batch, batch_idx);
  }
  torch::Tensor predict_step(Batch& batch, int64_t batch_idx) override {
    indices.push_back(trainer().batch_indices());
    return TinyModule::predict_step(batch, batch_idx);
  }
  std::vector<int64_t> seen_counts;
  std::vector<std::vector<int64_t>> indices;
};

// A stream trains as the same rows in a dataset do: the epoch runs to the stream's end (its short
// last batch included, which ends an accumulation window), the Trainer learns the count only as the
// end comes within reach.
TEST(Streams, FitTrainsAsTheSameRowsInADataset) {
  const auto options = quiet().max_epochs(2).accumulate_grad_batches(2);
  torch::manual_seed(0);
  Counting on_stream;
  torch::manual_seed(0);
  Counting on_dataset;
  Trainer stream_trainer(options);
  stream_trainer.fit(on_stream, tiny_stream(10, 4));
  Trainer(options).fit(on_dataset, tiny_data(10, 4));
  EXPECT_TRUE(torch::equal(weights_of(on_stream), weights_of(on_dataset)));
  EXPECT_EQ(on_stream.counts["training_step"], 6);
  EXPECT_EQ(stream_trainer.global_step(), 4);  // 2 windows an epoch: batches {0, 1} and {2}
  EXPECT_EQ(stream_trainer.num_training_batches(), 3);
  // The loop reads three batches ahead: the end is known from the second batch on.
  constexpr int64_t unknown = kUnknownLength;
  EXPECT_EQ(on_stream.seen_counts, (std::vector<int64_t>{unknown, 3, 3, unknown, 3, 3}));
  Counting longer;
  Trainer(quiet().max_epochs(1)).fit(longer, tiny_stream(14, 2));
  EXPECT_EQ(longer.seen_counts, (std::vector<int64_t>{unknown, unknown, unknown, unknown, unknown, 7, 7}));
}

TEST(Streams, ValidateTestAndPredictRunToTheStreamsEnd) {
  Counting module;
  const double on_stream = Trainer(quiet()).validate(module, tiny_stream(10, 3)).at("val_loss");
  const double on_dataset = Trainer(quiet()).validate(module, tiny_data(10, 3)).at("val_loss");
  EXPECT_DOUBLE_EQ(on_stream, on_dataset);
  Trainer tester(quiet());
  EXPECT_DOUBLE_EQ(tester.test(module, tiny_stream(10, 3)).at("test_loss"),
                   Trainer(quiet()).test(module, tiny_data(10, 3)).at("test_loss"));
  EXPECT_EQ(tester.num_val_batches(), kUnknownLength);
  const auto outputs = Trainer(quiet()).predict(module, tiny_stream(5, 2));
  // The predictions' indices are the samples' positions in the stream.
  EXPECT_EQ(module.indices, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_TRUE(torch::allclose(torch::cat(outputs), Trainer(quiet()).predict(module, tiny_data(5, 5)).front()));
}

// A stream of unknown length has no fraction: limits count batches, estimated_stepping_batches
// needs max_steps, and the errors say so.
TEST(Streams, FractionsOfAnUnknownLengthAreErrorsAndCountsWork) {
  const auto fails_with = [](TrainerOptions options, const std::string& expected) {
    TinyModule module;
    try {
      Trainer(options).fit(module, tiny_stream(10, 2));
      ADD_FAILURE() << "no error; expected one with: " << expected;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  fails_with(quiet().limit_train_batches(BatchAmount::fraction(0.5)),
             "limit_train_batches=0.5 is a fraction of the batches, but the data is a stream of unknown length");
  fails_with(quiet().val_check_interval(BatchAmount::fraction(0.25)),
             "val_check_interval=0.25 is a fraction of an epoch, but the training data is a stream");
  TinyModule limited;
  Trainer trainer(quiet().max_epochs(2).limit_train_batches(BatchAmount::count(2)));
  trainer.fit(limited, tiny_stream(10, 2));
  EXPECT_EQ(limited.counts["training_step"], 4);
  // A count beyond the stream's end: the epoch still ends where the stream does (3 batches), the
  // last one ending an accumulation window.
  TinyModule beyond;
  Trainer long_limit(quiet().max_epochs(2).accumulate_grad_batches(2).limit_train_batches(BatchAmount::count(5)));
  long_limit.fit(beyond, tiny_stream(10, 4));
  EXPECT_EQ(beyond.counts["training_step"], 6);
  EXPECT_EQ(long_limit.global_step(), 4);

  // estimated_stepping_batches: max_steps, or an error that names it.
  struct Scheduled : TinyModule {
    std::vector<OptimizerConfig> configure_optimizers() override {
      estimated = trainer().estimated_stepping_batches();
      return TinyModule::configure_optimizers();
    }
    int64_t estimated = 0;
  };
  Scheduled bounded;
  Trainer(quiet().max_steps(7)).fit(bounded, tiny_stream(10, 2));
  EXPECT_EQ(bounded.estimated, 7);
  Scheduled unbounded;
  try {
    Trainer(quiet().max_epochs(2)).fit(unbounded, tiny_stream(10, 2));
    ADD_FAILURE() << "estimated_stepping_batches of a stream without max_steps gave " << unbounded.estimated;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("a stream of unknown length); set max_steps"), std::string::npos)
        << error.what();
  }
}

// The stream is opened again each epoch, with the epoch: its order can change as a shuffled one's.
TEST(Streams, EachEpochOpensTheStreamForThatEpoch) {
  TinyModule module;
  auto source = tiny_stream(6, 3, {.rotate_by_epoch = true});
  Trainer(quiet().max_epochs(3)).fit(module, source);
  const auto& data = dynamic_cast<const RowStreamDataset&>(*source.stream);
  EXPECT_EQ(data.opened, 3);
  // The first sample of each epoch's first batch: rows 0, 1 and 2 of x = arange / 24.
  ASSERT_EQ(module.seen_first_values.size(), 6u);
  EXPECT_FLOAT_EQ(module.seen_first_values[0], 0.0f);
  EXPECT_FLOAT_EQ(module.seen_first_values[2], 4.0f / 24);
  EXPECT_FLOAT_EQ(module.seen_first_values[4], 8.0f / 24);
}

}  // namespace
}  // namespace arc
