// The canonical workload is generated bit for bit: WORKLOAD.md's digests.
#include <arc/apps/examples/classifier.h>
#include <arc/apps/examples/workload.h>
#include <arc/cli/detail/run_report.h>

#include <arc/base/sha256.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace arc {
namespace {

TEST(Workload, DataMatchesPublishedDigests) {
  const auto& data = workload::data();
  ASSERT_EQ(data.x.sizes(), (std::vector<int64_t>{70000, 784}));
  EXPECT_EQ(sha256_hex(data.x.data_ptr<float>(), static_cast<size_t>(data.x.numel()) * 4),
            "217991051d8071aa984aa6df2b9c985ac1c7ff98f4dd738b9f4bc49659036ed4");
  const auto labels = data.y.to(torch::kUInt8).contiguous();
  EXPECT_EQ(sha256_hex(labels.data_ptr<uint8_t>(), static_cast<size_t>(labels.numel())),
            "0abc0f8faf03f31756c23c98ce9eec2386cbf591f5a4c9044c328efad08334c3");
}

TEST(Workload, InitialParametersMatchPublishedDigests) {
  examples::MlpClassifier mlp(Config(nlohmann::json::object(), "module"));
  EXPECT_EQ(cli::parameter_sha256(mlp), "6b5e2f8b84d1952b3a070b88c3d3d143131cec73a50bd27e2e8d77c35ad7cf7f");
  examples::CnnClassifier cnn(Config(nlohmann::json::object(), "module"));
  EXPECT_EQ(cli::parameter_sha256(cnn), "e78c977236d4ec1ee3ceb6041e0ba4081fb00bad23057242aca48c2a2f26293a");
  int64_t count = 0;
  for (const auto& p : mlp.parameters()) count += p.numel();
  EXPECT_EQ(count, 269322);
}

TEST(Workload, EpochOrderIsAPermutationSortedByKey) {
  const auto order = workload::epoch_order(60000, 0);
  std::vector<bool> seen(60000, false);
  for (const int64_t i : order) seen[static_cast<size_t>(i)] = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 60000);
  for (size_t k = 1; k < order.size(); ++k)
    ASSERT_LT(workload::splitmix64(1000, order[k - 1]), workload::splitmix64(1000, order[k]));
}

}  // namespace
}  // namespace arc
