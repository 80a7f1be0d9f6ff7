// GradReducer bucketing on a one-rank Gloo group, and that group's all_reduce, which exchanges
// nothing (averaging over ranks: ddp_test).
#include <arc/base/error.h>
#include <arc/base/reduce.h>
#include <arc/strategies/detail/process_group.h>
#include <arc/strategies/grad_reducer.h>

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

// A world of one exchanges nothing: every reduction of one rank's tensor is that tensor (the mean
// too, x / 1 being exact), so all_reduce returns no work in flight, and a mean of integers is still
// the error it is on every rank count. (A one-rank Gloo all-reduce cost a DDP step of the MLP 0.2 ms.)
TEST(Collectives, OneRankAllReduceIsItsTensorWithNothingInFlight) {
  auto group = solo();
  auto values = torch::tensor({1.5f, -2.0f, 3.25f});
  const auto before = values.clone();
  for (const auto op : {Reduce::sum, Reduce::mean, Reduce::max, Reduce::min}) {
    auto work = group->all_reduce(values, op);
    EXPECT_FALSE(work.started());
    work.wait();
    EXPECT_TRUE(torch::equal(values, before));
  }
  EXPECT_THROW(group->all_reduce(torch::ones({2}, torch::kLong), Reduce::mean), Error);
}

// gradient_as_bucket_view (the default): after a reduction each gradient is its bucket slot, so a
// backward into kept gradients adds into the bucket, and LibTorch's zero_grad (which detaches in
// place) works on it; set_to_none gradients come back into the bucket. Off: each has its own memory.
TEST(GradReducer, GradientsLiveInTheirBucketUnlessTurnedOff) {
  auto group = solo();
  auto w = torch::ones({3}, torch::requires_grad());
  auto b = torch::ones({2}, torch::requires_grad());
  GradReducer reducer({w, b}, {"w", "b"}, *group, ReducerOptions{});
  const auto step = [&] {
    reducer.prepare_for_backward();
    ((w * 2).sum() + (b * 3).sum()).backward();
  };
  const auto same_memory = [&] { return w.grad().storage().data() == b.grad().storage().data(); };
  step();
  ASSERT_TRUE(same_memory());
  const void* memory = w.grad().data_ptr();
  step();  // the gradients were kept: the second adds to the first, in the bucket
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 4.0f)));
  EXPECT_TRUE(torch::equal(b.grad(), torch::full({2}, 6.0f)));
  EXPECT_EQ(w.grad().data_ptr(), memory);
  torch::optim::SGD sgd(std::vector<torch::Tensor>{w, b}, torch::optim::SGDOptions(0.1));
  sgd.zero_grad();  // LibTorch 1.x: detach_ and zero_ in place; 2.x: set to none
  EXPECT_TRUE(!w.grad().defined() || torch::equal(w.grad(), torch::zeros({3})));
  w.mutable_grad() = torch::Tensor();
  b.mutable_grad() = torch::Tensor();
  step();
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(b.grad(), torch::full({2}, 3.0f)));
  EXPECT_TRUE(same_memory());

  auto x = torch::ones({3}, torch::requires_grad());
  auto y = torch::ones({2}, torch::requires_grad());
  ReducerOptions copying;
  copying.gradient_as_bucket_view(false);
  GradReducer separate({x, y}, {"x", "y"}, *group, copying);
  for (int i = 0; i < 2; ++i) {
    separate.prepare_for_backward();
    ((x * 2).sum() + (y * 3).sum()).backward();
  }
  EXPECT_TRUE(torch::equal(x.grad(), torch::full({3}, 4.0f)));
  EXPECT_NE(x.grad().storage().data(), y.grad().storage().data());
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
  tolerant.find_unused_parameters(true);
  GradReducer lenient({a, b}, {"a", "b"}, *group, tolerant);
  lenient.prepare_for_backward();
  (a * 2).sum().backward();
  EXPECT_TRUE(torch::equal(b.grad(), torch::zeros({2})));
}

// b gets no gradient; a first bucket of 8 bytes holds b alone, so a's bucket waits for it.
TEST(GradReducer, StaticGraphStartsTheBucketsOfUnusedParametersDuringBackward) {
  auto group = solo();
  const auto step = [](GradReducer& reducer, torch::Tensor a) {
    a.mutable_grad() = torch::Tensor();
    reducer.prepare_for_backward();
    (a * 2).sum().backward();
  };
  ReducerOptions tolerant;
  tolerant.first_bucket_bytes(8);
  tolerant.find_unused_parameters(true);
  auto a = torch::ones({2}, torch::requires_grad()), b = torch::ones({2}, torch::requires_grad());
  GradReducer finding({a, b}, {"a", "b"}, *group, tolerant);
  ASSERT_EQ(finding.bucket_layout(), (std::vector<std::vector<size_t>>{{1}, {0}}));
  step(finding, a);
  step(finding, a);
  EXPECT_EQ(finding.late_buckets(), 2u);  // every step: both wait for the end of backward

  ReducerOptions learning;
  learning.first_bucket_bytes(8);
  learning.static_graph(true);
  auto c = torch::ones({2}, torch::requires_grad()), d = torch::ones({2}, torch::requires_grad());
  GradReducer fixed({c, d}, {"c", "d"}, *group, learning);
  step(fixed, c);
  EXPECT_EQ(fixed.late_buckets(), 2u);  // the first step learns
  step(fixed, c);
  EXPECT_EQ(fixed.late_buckets(), 0u);
  EXPECT_TRUE(torch::equal(c.grad(), torch::full({2}, 2.0f)));
  EXPECT_TRUE(torch::equal(d.grad(), torch::zeros({2})));

  // A graph that changes is an error that says so, whichever way it changes.
  fixed.prepare_for_backward();
  try {
    (c + d).sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("static_graph is on, but parameter d got a gradient"), std::string::npos)
        << error.what();
  }
  auto e = torch::ones({2}, torch::requires_grad()), f = torch::ones({2}, torch::requires_grad());
  GradReducer shrinking({e, f}, {"e", "f"}, *group, learning);
  shrinking.prepare_for_backward();
  (e + f).sum().backward();
  shrinking.prepare_for_backward();
  try {
    (e * 2).sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("static_graph is on, but parameters f got no gradient"), std::string::npos)
        << error.what();
  }
}

TEST(GradReducer, ARankThatSkipsVotesInTheReductionItJoins) {
  auto group = solo();
  auto w = torch::ones({3}, torch::requires_grad());
  GradReducer reducer({w}, {"w"}, *group, ReducerOptions{});
  reducer.prepare_for_backward();
  (w * 2).sum().backward();
  EXPECT_FALSE(reducer.skip_voted());
  reducer.reduce_without_backward();
  EXPECT_TRUE(reducer.skip_voted());
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 2.0f)));  // its gradients went through as they were
  reducer.prepare_for_backward();
  (w * 3).sum().backward();
  EXPECT_FALSE(reducer.skip_voted());
}

// Dense contiguous gradients go into their slots with a memcpy; others (here transposed) take
// copy_, and a gradient of the wrong size (set by hand) is an error, not a write past its slot.
TEST(GradReducer, GradientsTheMemcpyCannotTakeGoThroughCopy) {
  auto group = solo();
  auto w = torch::zeros({2, 3}, torch::requires_grad());
  auto b = torch::zeros({2}, torch::requires_grad());
  GradReducer reducer({w, b}, {"w", "b"}, *group, ReducerOptions{});
  const auto values = torch::arange(6, torch::kFloat).view({3, 2});
  w.mutable_grad() = values.t();
  b.mutable_grad() = torch::full({2}, 7.0f);
  ASSERT_FALSE(w.grad().is_contiguous());
  reducer.reduce_without_backward();
  EXPECT_TRUE(torch::equal(w.grad(), values.t()));
  EXPECT_TRUE(torch::equal(b.grad(), torch::full({2}, 7.0f)));
  w.mutable_grad() = torch::ones({8});
  EXPECT_ANY_THROW(reducer.reduce_without_backward());
}

}  // namespace
}  // namespace arc
