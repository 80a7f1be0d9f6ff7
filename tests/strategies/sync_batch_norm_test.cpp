// arc::SyncBatchNorm on its own: plain BatchNorm when no ranks are connected, and the option's check
// of layers it cannot synchronize. Two ranks against one process: DDP.SyncBatchNorm* in ddp_test.cpp.
#include <arc/strategies/sync_batch_norm.h>

#include "support/errors.h"
#include "support/tiny_module.h"

#include <gtest/gtest.h>

namespace arc {
namespace {

TEST(SyncBatchNorm, AloneItIsBatchNormWithTheSameNames) {
  torch::manual_seed(3);
  torch::nn::BatchNorm2d plain(torch::nn::BatchNorm2dOptions(3).momentum(0.3));
  SyncBatchNorm synced(torch::nn::BatchNormOptions(3).momentum(0.3));
  {
    torch::NoGradGuard no_grad;
    plain->weight.uniform_();
    plain->bias.uniform_();
    synced->weight.copy_(plain->weight);
    synced->bias.copy_(plain->bias);
  }
  for (int step = 0; step < 3; ++step) {
    auto x = torch::randn({8, 3, 4, 4}, torch::requires_grad()) * 2 + 1;
    auto a = plain(x), b = synced(x);
    EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-6));
    const auto ga = torch::autograd::grad({a.square().sum()}, {x})[0];
    const auto gb = torch::autograd::grad({b.square().sum()}, {x})[0];
    EXPECT_TRUE(torch::allclose(ga, gb, 1e-5, 1e-5));
  }
  EXPECT_TRUE(torch::allclose(plain->running_mean, synced->running_mean));
  EXPECT_TRUE(torch::allclose(plain->running_var, synced->running_var));
  EXPECT_EQ(synced->num_batches_tracked.item<int64_t>(), 3);
  plain->eval();
  synced->eval();
  const auto x = torch::randn({2, 3, 4, 4});
  EXPECT_TRUE(torch::allclose(plain(x), synced(x), 1e-6, 1e-6));

  std::vector<std::string> plain_names, synced_names;
  for (const auto& item : plain->named_parameters()) plain_names.push_back(item.key());
  for (const auto& item : plain->named_buffers()) plain_names.push_back(item.key());
  for (const auto& item : synced->named_parameters()) synced_names.push_back(item.key());
  for (const auto& item : synced->named_buffers()) synced_names.push_back(item.key());
  EXPECT_EQ(plain_names, synced_names);
  EXPECT_NE(testing::error_of([&] {
              synced(torch::zeros({2, 4}));
            }).find("expects input of shape (N, 3, ...)"),
            std::string::npos);
}

class PlainNorm : public testing::TinyModule {
 public:
  PlainNorm() { norm = register_module("norm", torch::nn::BatchNorm1d(4)); }
  torch::nn::BatchNorm1d norm{nullptr};
};

TEST(SyncBatchNorm, TheOptionNamesALayerItCannotSynchronize) {
  PlainNorm module;
  Trainer trainer(testing::quiet().max_steps(1).sync_batchnorm(true));
  const auto message = testing::error_of([&] { trainer.fit(module, testing::tiny_data(4, 2)); });
  EXPECT_NE(message.find("sync_batchnorm is on, but 'norm' is a torch::nn::BatchNorm1d"), std::string::npos) << message;
  EXPECT_NE(message.find("build it as arc::SyncBatchNorm(num_features)"), std::string::npos) << message;
  // Off, the plain layer trains as before.
  Trainer off(testing::quiet().max_steps(1));
  off.fit(module, testing::tiny_data(4, 2));
  EXPECT_EQ(off.global_step(), 1);
}

}  // namespace
}  // namespace arc
