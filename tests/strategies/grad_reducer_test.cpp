// GradReducer bucketing and averaging on a one-rank Gloo group (multi-rank runs: ddp_test).
#include <arc/base/error.h>
#include <arc/strategies/grad_reducer.h>
#include <arc/strategies/process_group.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace arc {
namespace {

std::unique_ptr<Collectives> solo() {
  RendezvousOptions options;
  options.timeout = std::chrono::seconds(10);
  return make_collectives(options);
}

TEST(GradReducer, BucketsGoInReverseOrderWithASmallFirstBucket) {
  auto group = solo();
  // 4 tensors of 0.5 MiB: the 1 MiB first bucket takes the last two, the rest share the next.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(torch::zeros({131072}, torch::requires_grad()));
  GradReducer reducer(params, {"a", "b", "c", "d"}, *group, ReducerOptions{});
  const auto& layout = reducer.bucket_layout();
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0], (std::vector<size_t>{3, 2}));
  EXPECT_EQ(layout[1], (std::vector<size_t>{1, 0}));
}

TEST(GradReducer, GradientsSurviveTheRoundTrip) {
  auto group = solo();
  auto w = torch::ones({3}, torch::requires_grad());
  auto b = torch::ones({2}, torch::requires_grad());
  GradReducer reducer({w, b}, {"w", "b"}, *group, ReducerOptions{});
  reducer.prepare_for_backward();
  ((w * 2).sum() + (b * 3).sum()).backward();
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(b.grad(), torch::full({2}, 3.0f)));
}

TEST(GradReducer, UnusedParametersAreAnErrorUnlessAllowed) {
  auto group = solo();
  auto used = torch::ones({2}, torch::requires_grad());
  auto unused = torch::ones({2}, torch::requires_grad());
  GradReducer strict({used, unused}, {"used", "head.unused"}, *group, ReducerOptions{});
  strict.prepare_for_backward();
  try {
    (used * 2).sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("head.unused got no gradient"), std::string::npos) << error.what();
  }
  auto a = torch::ones({2}, torch::requires_grad());
  auto b = torch::ones({2}, torch::requires_grad());
  ReducerOptions tolerant;
  tolerant.find_unused_parameters = true;
  GradReducer lenient({a, b}, {"a", "b"}, *group, tolerant);
  lenient.prepare_for_backward();
  (a * 2).sum().backward();
  EXPECT_TRUE(torch::equal(b.grad(), torch::zeros({2})));
}

}  // namespace
}  // namespace arc
