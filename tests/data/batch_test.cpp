#include "support/errors.h"

#include <arc/base/error.h>
#include <arc/data/batch.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace arc {
namespace {

TEST(Batch, GivesPositionalAndNamedTensors) {
  Batch batch{torch::ones({3, 2}), torch::zeros({3})};
  batch.set("label", torch::arange(3));
  EXPECT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch.batch_size(), 3);
  EXPECT_TRUE(batch.contains("label"));
  EXPECT_EQ(batch["label"][2].item<int64_t>(), 2);
  EXPECT_EQ(batch[0].sum().item<float>(), 6.0f);
}

TEST(Batch, UnknownNameSuggestsTheClosest) {
  Batch batch;
  batch.set("label", torch::zeros({1}));
  try {
    (void)batch["lable"];
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean 'label'"), std::string::npos) << error.what();
  }
  EXPECT_THROW((void)batch[0], Error);
}

TEST(Batch, ToCastsOnlyFloatingTensors) {
  Batch batch{torch::ones({2}, torch::kFloat), torch::ones({2}, torch::kLong)};
  batch.set("mask", torch::ones({2}, torch::kBool));
  const Batch moved = batch.to(torch::kCPU, torch::kDouble);
  EXPECT_EQ(moved[0].scalar_type(), torch::kDouble);
  EXPECT_EQ(moved[1].scalar_type(), torch::kLong);
  EXPECT_EQ(moved["mask"].scalar_type(), torch::kBool);
}

TEST(Batch, PartsAreBatchesWithinTheBatch) {
  Batch labeled{torch::ones({3, 2}), torch::zeros({3})};
  Batch unlabeled{torch::ones({5, 2})};
  unlabeled.set("mask", torch::ones({5}, torch::kBool));
  Batch batch;
  batch.set_part("labeled", labeled).set_part("unlabeled", unlabeled);
  EXPECT_FALSE(batch.empty());
  EXPECT_EQ(batch.batch_size(), 3);  // the first part's, as Lightning takes the first tensor it finds
  EXPECT_EQ(batch.part_names(), (std::vector<std::string>{"labeled", "unlabeled"}));
  EXPECT_TRUE(batch.has_part("unlabeled"));
  EXPECT_FALSE(batch.has_part("test"));
  const Batch moved = batch.to(torch::kCPU, torch::kDouble);
  EXPECT_EQ(moved.part("labeled")[0].scalar_type(), torch::kDouble);
  EXPECT_EQ(moved.part("unlabeled")["mask"].scalar_type(), torch::kBool);
  batch.part("labeled")[1] = torch::ones({3});
  EXPECT_EQ(batch.part("labeled")[1].sum().item<float>(), 3.0f);
  EXPECT_NE(testing::error_of([&] { (void)batch.part("unlabelled"); }).find("did you mean 'unlabeled'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { (void)labeled.part("x"); }).find("only a CombinedLoader's batches have parts"),
            std::string::npos);
}

}  // namespace
}  // namespace arc
