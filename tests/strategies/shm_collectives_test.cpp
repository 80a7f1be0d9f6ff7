// Shared-memory collectives with every rank a thread of this process (each rank maps the segment
// on its own, as separate processes do), checked against a fixed-order reference and Gloo.
#include <arc/base/detail/host.h>
#include <arc/strategies/detail/ordered_worker.h>
#include <arc/strategies/detail/process_group.h>
#include <arc/strategies/detail/shm_segment.h>
#include <arc/strategies/grad_reducer.h>

#include <support/errors.h>
#include <support/shm_maps.h>
#include <support/thread_ranks.h>

#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <numeric>
#include <optional>
#include <thread>

namespace arc {
namespace {

using namespace std::chrono_literals;
using testing::Group;
using testing::in_shm_mapping;
using testing::on_ranks;
using testing::shm_mappings;

torch::Tensor input(int64_t rank, int64_t numel, torch::ScalarType type) {
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(numel * 7919 + rank));
  auto values = torch::randn({numel}, generator, torch::kDouble);
  if (!torch::isFloatingType(type)) values = values * 1000;
  return values.to(type);
}

// The ranks' inputs reduced in rank order, accumulating 16-bit floats in float: what every rank
// must compute. A mean is that sum divided by torch's div_.
torch::Tensor reference(const std::vector<torch::Tensor>& inputs, Reduce op) {
  if (op == Reduce::mean) return reference(inputs, Reduce::sum).div_(static_cast<double>(inputs.size()));
  const auto type = inputs[0].scalar_type();
  const bool half = type == torch::kHalf || type == torch::kBFloat16;
  auto acc = inputs[0].to(half ? torch::kFloat : type);
  for (size_t r = 1; r < inputs.size(); ++r) {
    const auto next = inputs[r].to(acc.scalar_type());
    acc = op == Reduce::sum ? acc + next : op == Reduce::max ? torch::maximum(acc, next) : torch::minimum(acc, next);
  }
  return acc.to(type);
}

std::vector<torch::Tensor> inputs(int64_t world, int64_t numel, torch::ScalarType type) {
  std::vector<torch::Tensor> all;
  for (int64_t r = 0; r < world; ++r) all.push_back(input(r, numel, type));
  return all;
}

torch::Tensor reference(int64_t world, int64_t numel, torch::ScalarType type, Reduce op) {
  return reference(inputs(world, numel, type), op);
}

std::vector<std::string> segments_of_this_process() {
  std::vector<std::string> found;
  const std::string prefix = "arc-shm-" + std::to_string(getpid()) + "-";
  DIR* dir = opendir("/dev/shm");
  while (dirent* entry = readdir(dir))
    if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.push_back(entry->d_name);
  closedir(dir);
  return found;
}

const std::vector<torch::ScalarType> kTypes = {torch::kFloat,    torch::kDouble, torch::kHalf,
                                               torch::kBFloat16, torch::kInt,    torch::kLong};

// Every case through an ordinary tensor, and through a buffer from reduce_buffer, which is
// reduced where it lies (its data pointer stays).
void expect_reduces_like_reference(int64_t world, bool helper_thread = true,
                                   std::optional<std::chrono::microseconds> spin = std::nullopt) {
  // 1 element, an odd size reduced whole by every rank, an odd size reduced share by share (one
  // 256 KiB piece of floats and a remainder above 16 KiB), exactly one 4 MiB slot of floats, and
  // several slots with a remainder.
  const std::vector<int64_t> sizes = {1, 1001, 70'001, 1 << 20, 3'000'001};
  // Every rank's input and every expected result are made once before the ranks start (not by
  // each rank for each case, which made these the slowest tests of the suite).
  struct Case {
    std::vector<torch::Tensor> inputs;    // one per rank
    std::vector<torch::Tensor> expected;  // one per operation in kOps
  };
  const std::vector<Reduce> kOps = {Reduce::sum, Reduce::max, Reduce::min, Reduce::mean};
  std::vector<Case> cases;
  for (const auto type : kTypes)
    for (const auto numel : sizes) {
      Case c{inputs(world, numel, type), {}};
      for (const auto op : kOps)
        c.expected.push_back(op != Reduce::mean || torch::isFloatingType(type) ? reference(c.inputs, op)
                                                                               : torch::Tensor());
      cases.push_back(std::move(c));
    }
  Group group_options;
  group_options.helper_thread = helper_thread;
  group_options.spin = spin;
  on_ranks(world, group_options, [&](int64_t rank, Collectives& group) {
    EXPECT_EQ(group.backend(), "shared memory");
    for (const auto& c : cases) {
      const auto& mine = c.inputs[static_cast<size_t>(rank)];
      auto shared = group.reduce_buffer(mine.numel(), mine.options());
      const void* where = shared.data_ptr();
      ASSERT_TRUE(in_shm_mapping(where)) << "rank " << rank << " " << c10::toString(mine.scalar_type());
      for (size_t op = 0; op < kOps.size(); ++op) {
        if (!c.expected[op].defined()) continue;
        auto tensor = mine.clone();
        group.all_reduce(tensor, kOps[op]).wait();
        shared.copy_(mine);
        group.all_reduce(shared, kOps[op]).wait();
        const auto what = "rank " + std::to_string(rank) + " " + c10::toString(mine.scalar_type()) + " x " +
                          std::to_string(mine.numel()) + " op " + std::to_string(static_cast<int>(kOps[op]));
        ASSERT_TRUE(torch::equal(tensor, c.expected[op])) << what;
        ASSERT_TRUE(torch::equal(shared, c.expected[op])) << what << ", shared buffer";
        ASSERT_EQ(shared.data_ptr(), where) << what;
      }
    }
  });
}

TEST(ShmCollectives, TwoRanksMatchTheReferenceForEveryTypeAndSize) { expect_reduces_like_reference(2); }

TEST(ShmCollectives, ThreeRanksReduceInRankOrder) { expect_reduces_like_reference(3); }

// As DDP runs them where each rank has a core: on the training thread, waiting without sleeping.
TEST(ShmCollectives, OnTheCallingThreadReducesTheSame) { expect_reduces_like_reference(3, false, 1ms); }

// DDP gives its gradients one bucket size where the all-reduce cannot overlap backward.
TEST(ShmCollectives, OnlyAHelperThreadOverlapsTheCaller) {
  const auto cpu = torch::TensorOptions().dtype(torch::kFloat);
  on_ranks(2, Group{}, [&](int64_t, Collectives& group) { EXPECT_TRUE(group.all_reduce_overlaps(cpu)); });
  on_ranks(2, Group{true, {}, 20s, false}, [&](int64_t, Collectives& group) {
    EXPECT_FALSE(group.all_reduce_overlaps(cpu));
    // Types without a shared-memory kernel go through Gloo, whose threads overlap the caller.
    EXPECT_TRUE(group.all_reduce_overlaps(cpu.dtype(torch::kUInt8)));
  });
  on_ranks(2, Group{false, {}, 20s, false}, [&](int64_t, Collectives& group) {
    EXPECT_EQ(group.backend(), "gloo");
    EXPECT_TRUE(group.all_reduce_overlaps(cpu));
  });
}

TEST(ShmCollectives, SixtyFourMegabytes) {
  const int64_t numel = 16 << 20;
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto tensor = input(rank, numel, torch::kFloat);
    group.all_reduce(tensor, Reduce::sum).wait();
    EXPECT_TRUE(torch::equal(tensor, reference(2, numel, torch::kFloat, Reduce::sum)));
  });
}

// Sums of two are exact in either order, so shared memory and Gloo agree bit for bit, and so do
// their means.
TEST(ShmCollectives, TwoRanksAreBitIdenticalToGloo) {
  const std::vector<int64_t> sizes = {1, 1001, 300'001};
  for (const auto type : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kInt, torch::kLong}) {
    std::map<std::tuple<int64_t, int64_t, Reduce>, torch::Tensor> results;
    for (const bool shared_memory : {true, false}) {
      std::mutex mutex;
      on_ranks(2, Group{shared_memory, {}}, [&](int64_t rank, Collectives& group) {
        for (const auto numel : sizes)
          for (const auto op : {Reduce::sum, Reduce::mean}) {
            if (op == Reduce::mean && !torch::isFloatingType(type)) continue;
            auto tensor = input(rank, numel, type);
            group.all_reduce(tensor, op).wait();
            std::lock_guard<std::mutex> lock(mutex);
            auto& seen = results[{rank, numel, op}];
            if (seen.defined()) {
              EXPECT_TRUE(torch::equal(seen, tensor)) << c10::toString(type) << " x " << numel;
            } else {
              seen = tensor;
            }
          }
      });
    }
  }
}

TEST(ShmCollectives, ThreeRanksStayCloseToGloo) {
  std::vector<torch::Tensor> shm(3), gloo(3);
  for (const bool shared_memory : {true, false}) {
    on_ranks(3, Group{shared_memory, {}}, [&](int64_t rank, Collectives& group) {
      auto tensor = input(rank, 100'003, torch::kFloat);
      group.all_reduce(tensor, Reduce::sum).wait();
      (shared_memory ? shm : gloo)[static_cast<size_t>(rank)] = tensor;
    });
  }
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(torch::equal(shm[r], shm[0]));
    EXPECT_TRUE(torch::allclose(shm[r], gloo[r], 1e-6, 1e-6));
  }
}

// Without a helper thread each all-reduce is done when it returns; the results are the same.
class ShmThreading : public ::testing::TestWithParam<bool> {};

TEST_P(ShmThreading, ConcurrentBucketsAndRepeatedCalls) {
  Group options;
  options.helper_thread = GetParam();
  on_ranks(2, options, [&](int64_t rank, Collectives& group) {
    std::vector<torch::Tensor> buckets;
    std::vector<PendingWork> works;
    for (int64_t b = 0; b < 8; ++b) {
      buckets.push_back(input(rank, 1000 + b * 250'000, torch::kFloat));
      works.push_back(group.all_reduce(buckets.back(), Reduce::sum));
    }
    for (int64_t b = 0; b < 8; ++b) {
      works[static_cast<size_t>(b)].wait();
      EXPECT_TRUE(
          torch::equal(buckets[static_cast<size_t>(b)], reference(2, 1000 + b * 250'000, torch::kFloat, Reduce::sum)));
    }
    for (int i = 0; i < 2000; ++i) {
      auto largest = torch::full({3}, rank * 1000 + i, torch::kLong);
      group.all_reduce(largest, Reduce::max).wait();
      ASSERT_EQ(largest[2].item<int64_t>(), 1000 + i) << "call " << i;
    }
    for (int i = 0; i < 2000; ++i) {
      auto step = torch::full({5}, static_cast<double>(rank + i));
      group.all_reduce(step, Reduce::sum).wait();
      ASSERT_EQ(step[4].item<double>(), 2.0 * i + 1) << "call " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(ShmCollectives, ShmThreading, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "HelperThread" : "CallingThread"; });

TEST(ShmCollectives, NonContiguousTensorsAreReducedInPlace) {
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto matrix = torch::full({4, 6}, static_cast<float>(rank + 1));
    auto column = matrix.select(1, 2);
    group.all_reduce(column, Reduce::sum).wait();
    EXPECT_TRUE(torch::equal(matrix.select(1, 2), torch::full({4}, 3.0f)));
    EXPECT_EQ(matrix[0][0].item<float>(), static_cast<float>(rank + 1));
  });
}

TEST(ShmCollectives, BroadcastAllGatherAndBarrierGoThroughSharedMemory) {
  on_ranks(3, {}, [&](int64_t rank, Collectives& group) {
    auto big = input(rank, 2'500'000, torch::kFloat);
    group.broadcast(big, 2);
    EXPECT_TRUE(torch::equal(big, input(2, 2'500'000, torch::kFloat)));
    const auto gathered = group.all_gather(torch::full({2, 3}, rank, torch::kLong));
    ASSERT_EQ(gathered.size(), 3u);
    for (int64_t r = 0; r < 3; ++r)
      EXPECT_TRUE(torch::equal(gathered[static_cast<size_t>(r)], torch::full({2, 3}, r, torch::kLong)));
    for (int i = 0; i < 100; ++i) group.barrier();
  });
}

// reduce_scatter gives each rank its share of what all_reduce gives, bit for bit, and
// all_gather_into puts the shares back together in rank order; shares of one element, of less than
// a piece, and across several pieces of the shared-memory slots.
void expect_scatters_and_gathers(int64_t world, const Group& options,
                                 const std::vector<torch::ScalarType>& types = kTypes) {
  const std::vector<int64_t> shares = {1, 1001, 70'001, 300'007};
  on_ranks(world, options, [&](int64_t rank, Collectives& group) {
    for (const auto type : types)
      for (const auto share : shares) {
        const auto mine = input(rank, share * world, type);
        for (const auto op : {Reduce::sum, Reduce::max, Reduce::min, Reduce::mean}) {
          if (op == Reduce::mean && !torch::isFloatingType(type)) continue;
          const auto what = "rank " + std::to_string(rank) + " " + c10::toString(type) + " x " + std::to_string(share) +
                            " op " + std::to_string(static_cast<int>(op));
          auto all = mine.clone();
          group.all_reduce(all, op).wait();
          auto out = torch::full({share}, 7, type);
          group.reduce_scatter(out, mine, op);
          ASSERT_TRUE(torch::equal(out, all.narrow(0, rank * share, share))) << what;
          auto whole = torch::zeros({share * world}, type);
          group.all_gather_into(whole, out);
          ASSERT_TRUE(torch::equal(whole, all)) << what;
        }
      }
  });
}

TEST(ShmCollectives, ReduceScatterIsTheAllReducesShareBitForBit) {
  expect_scatters_and_gathers(2, {});
  expect_scatters_and_gathers(3, {});
}

// Gloo's come from its all-reduce and all-gather (LibTorch 1.13's Gloo has no reduce-scatter);
// across nodes, from the hierarchical all-reduce. (Gloo reduces no bfloat16.)
TEST(ShmCollectives, ReduceScatterThroughGlooAndAcrossNodes) {
  const std::vector<torch::ScalarType> gloo_types = {torch::kFloat, torch::kDouble, torch::kHalf, torch::kInt,
                                                     torch::kLong};
  expect_scatters_and_gathers(2, Group{false, {}}, gloo_types);
  expect_scatters_and_gathers(4, Group{true, {"a", "a", "b", "b"}}, gloo_types);
}

// HYBRID_SHARD's group of a node: its reduce_scatter gives each rank its node-local share of what
// the all-reduce over every rank gives, bit for bit on two nodes; its other collectives stay within
// the node. Ranks numbered otherwise than node by node are an error that says so.
TEST(ShmCollectives, HybridGroupsReduceScatterOverEveryRankAndGatherWithinTheNode) {
  Group nodes{true, {"a", "a", "b", "b"}};
  nodes.ranks_per_node = 2;
  on_ranks(4, nodes, [&](int64_t rank, Collectives& world, Collectives& shard) {
    EXPECT_EQ(shard.backend(), "shared memory within the node, gloo across nodes");
    ASSERT_EQ(shard.world_size(), 2);
    ASSERT_EQ(shard.rank(), rank % 2);
    for (const auto type : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kLong})
      for (const int64_t share : {1, 70'001, 300'007})
        for (const auto op : {Reduce::sum, Reduce::max, Reduce::min, Reduce::mean}) {
          if (op == Reduce::mean && !torch::isFloatingType(type)) continue;
          const auto what = "rank " + std::to_string(rank) + " " + c10::toString(type) + " x " + std::to_string(share) +
                            " op " + std::to_string(static_cast<int>(op));
          const auto mine = input(rank, share * 2, type);
          auto all = mine.clone();
          world.all_reduce(all, op).wait();
          auto out = torch::full({share}, 7, type);
          shard.reduce_scatter(out, mine, op);
          ASSERT_TRUE(torch::equal(out, all.narrow(0, shard.rank() * share, share))) << what;
        }
    auto whole = torch::zeros({4}, torch::kLong);
    shard.all_gather_into(whole, torch::full({2}, rank, torch::kLong));
    const int64_t first = rank - rank % 2;
    EXPECT_TRUE(torch::equal(whole, torch::tensor({first, first, first + 1, first + 1})));
    auto value = torch::full({1}, static_cast<double>(rank));
    shard.all_reduce(value, Reduce::sum).wait();
    EXPECT_EQ(value.item<double>(), static_cast<double>(2 * first + 1));
  });
  RendezvousOptions interleaved;
  interleaved.rank = 1;
  interleaved.world_size = 4;
  const auto message = testing::error_of([&] { make_hybrid_collectives(interleaved, {}, 0, 2); });
  EXPECT_NE(message.find("HYBRID_SHARD shards within each node and needs the ranks numbered node by node, every node "
                         "with 2 ranks, but rank 1 of 4 is local rank 0"),
            std::string::npos)
      << message;
}

TEST(ShmCollectives, ReduceScatterAndAllGatherIntoCheckTheirShapes) {
  on_ranks(2, {}, [&](int64_t, Collectives& group) {
    const auto message =
        testing::error_of([&] { group.reduce_scatter(torch::zeros({3}), torch::zeros({7}), Reduce::sum); });
    EXPECT_NE(message.find("reduce_scatter: the whole tensor must hold world_size (2) times the elements of a rank's "
                           "share, of the same type and device; got 7 Float on cpu and 3 Float on cpu"),
              std::string::npos)
        << message;
    EXPECT_NE(testing::error_of([&] {
                group.all_gather_into(torch::zeros({4}, torch::kDouble), torch::zeros({2}));
              }).find("all_gather_into: the whole tensor must hold"),
              std::string::npos);
    EXPECT_NE(testing::error_of([&] {
                group.reduce_scatter(torch::zeros({2}, torch::kLong), torch::zeros({4}, torch::kLong), Reduce::mean);
              }).find("the mean of a Long tensor"),
              std::string::npos);
    const auto strided = testing::error_of([&] { group.all_gather_into(torch::zeros({4, 2}).t(), torch::zeros({4})); });
    EXPECT_NE(strided.find("all_gather_into: both tensors must be contiguous, but the whole one (sizes [2, 4], "
                           "strides [1, 2]) is not; pass a .contiguous() copy"),
              std::string::npos)
        << strided;
    group.barrier();
  });
}

TEST(ShmCollectives, SeveralNodesReduceHierarchically) {
  for (const auto& nodes : std::vector<std::vector<std::string>>{{"a", "a", "b", "b"}, {"a", "b", "a"}}) {
    const auto world = static_cast<int64_t>(nodes.size());
    on_ranks(world, Group{true, nodes}, [&](int64_t rank, Collectives& group) {
      EXPECT_EQ(group.backend(), "shared memory within each node, gloo across 2 nodes");
      for (const auto op : {Reduce::sum, Reduce::max, Reduce::mean}) {
        auto tensor = input(rank, 1'500'000, torch::kDouble);
        group.all_reduce(tensor, op).wait();
        EXPECT_TRUE(torch::allclose(tensor, reference(world, 1'500'000, torch::kDouble, op), 1e-12, 1e-12));
        auto buffer = group.reduce_buffer(1000, torch::kDouble);
        buffer.copy_(input(rank, 1000, torch::kDouble));
        group.all_reduce(buffer, op).wait();
        EXPECT_TRUE(torch::allclose(buffer, reference(world, 1000, torch::kDouble, op), 1e-12, 1e-12));
      }
      auto value = torch::full({1}, static_cast<double>(rank));
      group.broadcast(value, world - 1);
      EXPECT_EQ(value.item<double>(), static_cast<double>(world - 1));
    });
  }
}

// Each rank maps the buffer's file once, one region per rank; the file's name is gone as soon as
// every rank has it, and the mapping lives as long as the tensor, even past its group.
TEST(ShmCollectives, SharedBuffersAreMappedByEveryRankAndLiveAsLongAsTheirTensors) {
  const auto before = shm_mappings().size();
  std::vector<torch::Tensor> kept(2);
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto buffer = group.reduce_buffer(1'000'001, torch::kFloat);
    EXPECT_TRUE(torch::equal(buffer, torch::zeros({1'000'001})));
    group.barrier();
    EXPECT_TRUE(segments_of_this_process().empty());
    buffer.fill_(static_cast<float>(rank + 1));
    group.all_reduce(buffer, Reduce::mean).wait();
    kept[static_cast<size_t>(rank)] = buffer;
  });
  const auto mapped = shm_mappings();
  ASSERT_EQ(mapped.size(), before + 2);
  EXPECT_EQ(mapped.back(), 2 * ((4'000'004 + 4095) / 4096 * 4096)) << "two page-aligned regions";
  for (auto& buffer : kept) {
    EXPECT_TRUE(torch::equal(buffer, torch::full({1'000'001}, 1.5f)));
    buffer.add_(1);
  }
  kept.clear();
  EXPECT_EQ(shm_mappings().size(), before);
}

// DDP's gradient buckets are such buffers: after a reduction each gradient lies in memory that both
// ranks map, and holds the mean of the ranks' gradients.
TEST(ShmCollectives, GradientBucketsAreSharedBuffers) {
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto w = torch::ones({300}, torch::requires_grad());
    auto b = torch::ones({7}, torch::requires_grad());
    GradReducer reducer({w, b}, {"w", "b"}, group, ReducerOptions{});
    reducer.prepare_for_backward();
    ((w * static_cast<float>(rank + 1)).sum() + (b * static_cast<float>(3 * rank)).sum()).backward();
    EXPECT_TRUE(torch::equal(w.grad(), torch::full({300}, 1.5f)));
    EXPECT_TRUE(torch::equal(b.grad(), torch::full({7}, 1.5f)));
    EXPECT_TRUE(in_shm_mapping(w.grad().data_ptr()));
    EXPECT_TRUE(in_shm_mapping(b.grad().data_ptr()));
  });
}

// A rank that reduces a shared buffer and one that reduces an ordinary tensor of the same size
// would read memory the other never writes; both fail, naming what each does.
TEST(ShmCollectives, ASharedBufferOnOneRankAndAnOrdinaryTensorOnTheOtherIsAnError) {
  std::vector<std::string> messages(2);
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto buffer = group.reduce_buffer(100, torch::kFloat);
    auto ordinary = torch::zeros({100});
    messages[static_cast<size_t>(rank)] =
        testing::error_of([&] { group.all_reduce(rank == 0 ? buffer : ordinary, Reduce::sum).wait(); });
  });
  for (const auto& message : messages) {
    EXPECT_NE(message.find("all_reduce of a shared buffer (sum) of 400 bytes of Float"), std::string::npos) << message;
    EXPECT_NE(message.find("all_reduce (sum) of 400 bytes of Float"), std::string::npos) << message;
  }
}

// Without room in /dev/shm (here: a file size limit below the buffer's file) the buffer is an
// ordinary tensor, and reduces the same through the slots.
TEST(ShmCollectives, WithoutRoomForASharedBufferItIsAnOrdinaryTensor) {
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  const auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit limit = old_limit;
  limit.rlim_cur = 20 << 20;  // above the segment (16 MiB of slots), below the buffer's 64 MiB
  setrlimit(RLIMIT_FSIZE, &limit);
  const auto message = testing::error_of([] { ShmFile::create(64 << 20); });
  const auto before = shm_mappings().size();
  on_ranks(2, {}, [&](int64_t rank, Collectives& group) {
    auto buffer = group.reduce_buffer(8 << 20, torch::kFloat);
    const auto mapped = shm_mappings();
    EXPECT_EQ(std::count(mapped.begin(), mapped.end(), 64 << 20), 0) << "no buffer file mapped";
    buffer.copy_(input(rank, 8 << 20, torch::kFloat));
    group.all_reduce(buffer, Reduce::sum).wait();
    EXPECT_TRUE(torch::equal(buffer, reference(2, 8 << 20, torch::kFloat, Reduce::sum)));
  });
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(shm_mappings().size(), before);
  EXPECT_NE(message.find("cannot make the shared-memory file /dev/shm/arc-shm-"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_NE(message.find("free space in /dev/shm"), std::string::npos) << message;
}

// A mean of integers has no integer result: every rank fails before it waits for the others.
TEST(ShmCollectives, TheMeanOfIntegersIsAnErrorOnEveryBackend) {
  for (const bool shared_memory : {true, false}) {
    on_ranks(2, Group{shared_memory, {}}, [&](int64_t, Collectives& group) {
      auto counts = torch::ones({4}, torch::kLong);
      const auto message = testing::error_of([&] { group.all_reduce(counts, Reduce::mean).wait(); });
      EXPECT_NE(message.find("the mean of a Long tensor cannot be held in Long"), std::string::npos) << message;
      group.all_reduce(counts, Reduce::sum).wait();
      EXPECT_TRUE(torch::equal(counts, torch::full({4}, 2, torch::kLong)));
    });
  }
}

TEST(ShmCollectives, OneRankPerNodeIsPlainGloo) {
  on_ranks(2, Group{true, {"a", "b"}}, [&](int64_t, Collectives& group) { EXPECT_EQ(group.backend(), "gloo"); });
}

// The error is the same in both modes; the helper thread returns from all_reduce at once and
// reports at wait(), the calling thread does the waiting inside all_reduce.
TEST(ShmCollectives, MissingRankTimesOutNamingIt) {
  for (const bool helper_thread : {true, false}) {
    std::chrono::duration<double> in_call{};
    const auto message = testing::error_of([&] {
      Group spinning{true, {}, 2s, helper_thread};
      spinning.spin = 1ms;
      on_ranks(2, spinning, [&](int64_t rank, Collectives& group) {
        auto tensor = torch::ones({10});
        if (rank != 0) return;
        const auto start = std::chrono::steady_clock::now();
        auto work = group.all_reduce(tensor, Reduce::sum);
        in_call = std::chrono::steady_clock::now() - start;
        work.wait();
      });
    });
    EXPECT_NE(message.find("rank 1 did not reach shared-memory collective step 1 within the 2 s timeout"),
              std::string::npos)
        << "helper thread " << helper_thread << ": " << message;
    if (helper_thread) {
      EXPECT_LT(in_call.count(), 1.0);
    } else {
      EXPECT_GE(in_call.count(), 1.9);
    }
  }
}

// Collectives called in different orders on two ranks (a vote on one, a gradient bucket on the
// other) would pair up step by step and read each other's data; each step compares what the ranks
// do, so every rank fails, naming both.
TEST(ShmCollectives, CollectivesInDifferentOrdersAreAnErrorNamingBoth) {
  for (const bool helper_thread : {true, false}) {
    std::vector<std::string> messages(2);
    on_ranks(2, Group{true, {}, 20s, helper_thread}, [&](int64_t rank, Collectives& group) {
      auto ballot = torch::zeros({9}, torch::kLong);
      auto bucket = torch::ones({196});
      messages[static_cast<size_t>(rank)] = testing::error_of([&] {
        group.all_reduce(rank == 0 ? ballot : bucket, rank == 0 ? Reduce::max : Reduce::sum).wait();
        group.all_reduce(rank == 0 ? bucket : ballot, rank == 0 ? Reduce::sum : Reduce::max).wait();
      });
    });
    for (int64_t rank = 0; rank < 2; ++rank) {
      const auto& message = messages[static_cast<size_t>(rank)];
      EXPECT_NE(message.find("the ranks called collectives in different orders: rank " + std::to_string(rank) +
                             " is in all_reduce"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("all_reduce (max) of 72 bytes of Long"), std::string::npos) << message;
      EXPECT_NE(message.find("all_reduce (sum) of 784 bytes of Float"), std::string::npos) << message;
    }
  }
}

// collective_timeout bounds a collective's wait, timeout a barrier's (set-up, checkpoint saves): a
// rank 2.5 s late passes a barrier; a rank 6 s late in an all-reduce fails it after about 1 s,
// naming the option; through shared memory and through Gloo.
TEST(ShmCollectives, CollectivesWaitUpToCollectiveTimeoutAndBarriersUpToTimeout) {
  for (const bool shared_memory : {true, false}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "gloo");
    const Group group{shared_memory, {}, 20s, true, 1s};
    on_ranks(2, group, [&](int64_t rank, Collectives& collectives) {
      if (rank == 1) std::this_thread::sleep_for(2500ms);
      collectives.barrier();
    });
    std::chrono::duration<double> waited{};
    const auto message = testing::error_of([&] {
      on_ranks(2, group, [&](int64_t rank, Collectives& collectives) {
        auto tensor = torch::ones({10});
        if (rank == 1) {
          std::this_thread::sleep_for(6s);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          collectives.all_reduce(tensor, Reduce::sum).wait();
        } catch (...) {
          waited = std::chrono::steady_clock::now() - start;
          throw;
        }
      });
    });
    EXPECT_NE(message.find("collective_timeout"), std::string::npos) << message;
    // Well before the late rank would have come (6 s), let alone the group's timeout (20 s).
    EXPECT_LT(waited.count(), 5.0) << message;
  }
}

// Tensors made in an evaluation step under inference_mode go through every backend (Gloo's threads
// run outside inference mode, where such a tensor may not be written).
TEST(ShmCollectives, InferenceTensorsGoThroughSharedMemoryAndGloo) {
  for (const bool shared_memory : {true, false}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "gloo");
    on_ranks(2, Group{shared_memory, {}}, [&](int64_t rank, Collectives& group) {
      const c10::InferenceMode inference;
      auto value = torch::full({3}, static_cast<float>(rank + 1));
      group.all_reduce(value, Reduce::sum).wait();
      EXPECT_TRUE(torch::equal(value, torch::full({3}, 3.0f)));
      auto from_one = torch::full({2}, static_cast<float>(rank));
      group.broadcast(from_one, 1);
      EXPECT_TRUE(torch::equal(from_one, torch::ones({2})));
      const auto gathered = group.all_gather(torch::full({1}, static_cast<double>(rank)));
      ASSERT_EQ(gathered.size(), 2u);
      EXPECT_EQ(gathered[1].item<double>(), 1.0);
    });
  }
}

TEST(ShmCollectives, SegmentsAreUnlinkedOnceEveryRankHasThem) {
  on_ranks(2, {}, [&](int64_t, Collectives& group) {
    ASSERT_EQ(group.backend(), "shared memory");
    group.barrier();
    EXPECT_TRUE(segments_of_this_process().empty());
  });
}

TEST(ShmSegment, RefusesASegmentWithTheWrongMode) {
  auto created = ShmSegment::create(2, 4096, 0);
  ASSERT_EQ(chmod(("/dev/shm" + created->name()).c_str(), 0644), 0);
  const auto message = testing::error_of([&] { ShmSegment::open(created->name(), 2, 4096, 1, 1); });
  EXPECT_NE(message.find("mode 644"), std::string::npos) << message;
  created.reset();
  EXPECT_TRUE(segments_of_this_process().empty());
}

// Voluntary context switches of the calling thread so far (yielding the core is not one).
long sleeps_of_this_thread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

// The waits that the spin tests below repeat: on a loaded machine a spinning thread may still sleep
// now and then on a lock that has nothing to do with the wait (an allocator's, the address space's),
// so they count sleeps over many waits: with a long spin at most a quarter of the waits sleep, with
// none at least half of them do (every wait does, unless the machine delays the waiting thread
// past the peer).
constexpr int kSpinWaits = 8;
constexpr long kSpinningSleeps = kSpinWaits / 4, kSleepingSleeps = kSpinWaits / 2;

// A rank that may spin long waits for a late peer without sleeping (no voluntary context switch:
// yielding the core is not one); with the default 20 us it sleeps on the futex.
TEST(ShmSegment, ALongSpinWaitsForALatePeerWithoutSleeping) {
  for (const bool long_spin : {true, false}) {
    SCOPED_TRACE(long_spin ? "long spin" : "default spin");
    auto first = ShmSegment::create(2, 4096, 0);
    auto second = ShmSegment::open(first->name(), 2, 4096, 1, 1);
    if (long_spin) first->spin_before_sleeping(20s);
    const std::atomic<bool> stop{false};
    long sleeps = 0;
    for (uint32_t step = 1; step <= static_cast<uint32_t>(kSpinWaits); ++step) {
      std::thread late([&] {
        std::this_thread::sleep_for(20ms);
        second->arrive_and_wait(step, 20s, stop);
      });
      const long before = sleeps_of_this_thread();
      first->arrive_and_wait(step, 20s, stop);
      sleeps += std::min(sleeps_of_this_thread() - before, 1L);
      late.join();
    }
    if (long_spin) {
      EXPECT_LE(sleeps, kSpinningSleeps);
    } else {
      EXPECT_GE(sleeps, kSleepingSleeps);
    }
  }
  EXPECT_TRUE(segments_of_this_process().empty());
}

// With a long spin, the worker's thread waits for a job that comes 20 ms after the last, and the
// caller for a job that takes 20 ms, without sleeping; without one both sleep. Jobs still run in
// order and a failure still reaches the caller.
TEST(OrderedWorker, ALongSpinHandsJobsOverWithoutSleeping) {
  for (const bool long_spin : {true, false}) {
    SCOPED_TRACE(long_spin ? "long spin" : "no spin");
    OrderedWorker worker(true, long_spin ? std::chrono::microseconds(20s) : std::chrono::microseconds(0));
    std::vector<int> order;
    long worker_sleeps = 0, caller_sleeps = 0;
    for (int wait = 0; wait < kSpinWaits; ++wait) {
      long worker_at_end = 0, worker_at_start = 0;
      worker.call([&] {
        order.push_back(2 * wait + 1);
        worker_at_end = sleeps_of_this_thread();
      });
      std::this_thread::sleep_for(20ms);
      const auto done = worker.submit([&] {
        worker_at_start = sleeps_of_this_thread();
        order.push_back(2 * wait + 2);
        const auto until = std::chrono::steady_clock::now() + 20ms;
        while (std::chrono::steady_clock::now() < until) {
        }
      });
      const long caller_before = sleeps_of_this_thread();
      OrderedWorker::wait(done, worker.spin());
      caller_sleeps += std::min(sleeps_of_this_thread() - caller_before, 1L);
      worker_sleeps += std::min(worker_at_start - worker_at_end, 1L);
    }
    std::vector<int> expected(2 * kSpinWaits);
    std::iota(expected.begin(), expected.end(), 1);
    EXPECT_EQ(order, expected);
    if (long_spin) {
      EXPECT_LE(worker_sleeps, kSpinningSleeps);
      EXPECT_LE(caller_sleeps, kSpinningSleeps);
    } else {
      EXPECT_GE(worker_sleeps, kSleepingSleeps);
      EXPECT_GE(caller_sleeps, kSleepingSleeps);
    }
    const auto failed = worker.submit([] { throw Error("bucket 3 failed"); });
    EXPECT_EQ(testing::error_of([&] { OrderedWorker::wait(failed, worker.spin()); }), "bucket 3 failed");
  }
}

// DDP gives each rank a helper thread only where the ranks' compute threads leave every helper a core
// of its own, and lets a rank wait without sleeping where the compute threads each have one.
TEST(ShmCollectives, AHelperThreadOnlyWhereEveryRanksHelperHasACore) {
  const int64_t cores = usable_cores();
  RendezvousOptions options;
  fit_shm_to_cores(options, 1, cores - 1);
  EXPECT_TRUE(options.shm_helper_thread);
  EXPECT_EQ(options.shm_spin, std::chrono::microseconds(1ms));
  fit_shm_to_cores(options, 1, cores);
  EXPECT_FALSE(options.shm_helper_thread);
  EXPECT_EQ(options.shm_spin, std::chrono::microseconds(1ms));
  fit_shm_to_cores(options, 2, 1);
  EXPECT_EQ(options.shm_helper_thread, cores >= 4);
  fit_shm_to_cores(options, 2, cores);
  EXPECT_FALSE(options.shm_helper_thread);
  EXPECT_FALSE(options.shm_spin.has_value());
  // On other machines: two ranks of one thread get helpers from four cores on, not on three (where
  // the helpers would take turns with the training threads), and wait without sleeping on both.
  fit_shm_to_cores(options, 2, 1, 3);
  EXPECT_FALSE(options.shm_helper_thread);
  EXPECT_EQ(options.shm_spin, std::chrono::microseconds(1ms));
  fit_shm_to_cores(options, 2, 1, 4);
  EXPECT_TRUE(options.shm_helper_thread);
  fit_shm_to_cores(options, 2, 2, 5);
  EXPECT_FALSE(options.shm_helper_thread);
  EXPECT_EQ(options.shm_spin, std::chrono::microseconds(1ms));
  fit_shm_to_cores(options, 2, 2, 6);
  EXPECT_TRUE(options.shm_helper_thread);
}

// DDP's wiring of the same: with a helper thread and the group's spin, the training thread waits
// for an all-reduce that a late peer holds up 20 ms without sleeping.
TEST(ShmCollectives, TheTrainingThreadWaitsForTheHelperForTheGroupsSpin) {
  for (const bool long_spin : {true, false}) {
    SCOPED_TRACE(long_spin ? "long spin" : "no spin");
    Group options;
    if (long_spin) options.spin = 20s;
    long caller_sleeps = 0;
    on_ranks(2, options, [&](int64_t rank, Collectives& group) {
      for (int wait = 0; wait < kSpinWaits; ++wait) {
        auto tensor = torch::full({10}, static_cast<double>(rank + 1));
        if (rank == 1) std::this_thread::sleep_for(20ms);
        const long before = sleeps_of_this_thread();
        group.all_reduce(tensor, Reduce::sum).wait();
        if (rank == 0) caller_sleeps += std::min(sleeps_of_this_thread() - before, 1L);
        EXPECT_TRUE(torch::equal(tensor, torch::full({10}, 3.0)));
      }
    });
    if (long_spin) {
      EXPECT_LE(caller_sleeps, kSpinningSleeps);
    } else {
      EXPECT_GE(caller_sleeps, kSleepingSleeps);
    }
  }
}

TEST(ShmSegment, RemovesSegmentsThatDeadProcessesLeftBehind) {
  pid_t child = 0;
  char true_path[] = "/bin/true";
  char* argv[] = {true_path, nullptr};
  ASSERT_EQ(posix_spawn(&child, true_path, nullptr, nullptr, argv, environ), 0);
  waitpid(child, nullptr, 0);
  const std::string stale = "/arc-shm-" + std::to_string(child) + "-0123456789abcdef";
  const std::string live = "/arc-shm-" + std::to_string(getpid()) + "-0123456789abcdef";
  for (const auto& name : {stale, live}) close(shm_open(name.c_str(), O_CREAT | O_RDWR, 0600));
  EXPECT_GE(ShmSegment::remove_stale(), 1);
  EXPECT_NE(access(("/dev/shm" + stale).c_str(), F_OK), 0) << "the dead process's segment is gone";
  EXPECT_EQ(access(("/dev/shm" + live).c_str(), F_OK), 0) << "a live process's segment stays";
  shm_unlink(live.c_str());
}

}  // namespace
}  // namespace arc
