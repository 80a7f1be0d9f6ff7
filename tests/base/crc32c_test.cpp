#include <arc/base/detail/crc32c.h>
#include <arc/base/error.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace arc {
namespace {

std::vector<uint8_t> random_bytes(size_t size) {
  std::mt19937_64 generator(7);
  std::vector<uint8_t> bytes(size);
  for (auto& byte : bytes) byte = static_cast<uint8_t>(generator());
  return bytes;
}

// The checksum of bytes [begin, end), fed in updates of `step` bytes.
BlobChecksum sum_of(const std::vector<uint8_t>& bytes, size_t begin, size_t end, size_t step) {
  BlobChecksum sum;
  for (size_t at = begin; at < end; at += step) sum.update(bytes.data() + at, std::min(step, end - at));
  return sum;
}

TEST(Crc32c, MatchesTheCheckValue) { EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u); }

TEST(BlobChecksum, PiecesJoinedInOrderEqualTheWhole) {
  const auto bytes = random_bytes((1 << 20) + 45);
  const std::string whole = sum_of(bytes, 0, bytes.size(), bytes.size()).hex();
  EXPECT_EQ(sum_of(bytes, 0, bytes.size(), 1000).hex(), whole);
  // Cuts on 32-byte groups: an empty first piece, a single group, pieces of other sizes, the last
  // with the 13-byte tail.
  for (const std::vector<size_t>& cuts :
       {std::vector<size_t>{0, 0, 32, 4096, 1 << 19, bytes.size()},
        std::vector<size_t>{0, (1 << 20) + 32, bytes.size()}, std::vector<size_t>{0, 1 << 20, bytes.size()}}) {
    BlobChecksum joined;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) joined.append(sum_of(bytes, cuts[i], cuts[i + 1], 777));
    EXPECT_EQ(joined.hex(), whole) << cuts.size() - 1 << " pieces";
  }
}

TEST(BlobChecksum, JoinedPiecesTellTheirOrderAndEveryByte) {
  auto bytes = random_bytes(1 << 16);
  const auto joined = [&](size_t first, size_t second) {
    BlobChecksum sum;
    sum.append(sum_of(bytes, first, first + (1 << 15), 1 << 15));
    sum.append(sum_of(bytes, second, second + (1 << 15), 1 << 15));
    return sum.hex();
  };
  const std::string in_order = joined(0, 1 << 15);
  EXPECT_NE(joined(1 << 15, 0), in_order);
  bytes[(1 << 15) + 5] ^= 1;
  EXPECT_NE(joined(0, 1 << 15), in_order);
}

TEST(BlobChecksum, AppendingAfterAPartialGroupIsAnError) {
  const auto bytes = random_bytes(64);
  BlobChecksum sum = sum_of(bytes, 0, 40, 40);
  try {
    sum.append(sum_of(bytes, 40, 64, 24));
    FAIL() << "appended after 40 bytes";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("whole 32-byte groups, got 40 bytes"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace arc
