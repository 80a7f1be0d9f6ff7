#include <arc/base/sha256.h>

#include <gtest/gtest.h>

#include <string>

namespace arc {
namespace {

TEST(Sha256, MatchesKnownDigests) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string long_input(1000000, 'a');
  EXPECT_EQ(sha256_hex(long_input.data(), long_input.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  const std::string text = "the quick brown fox jumps over the lazy dog, many times over and over";
  Sha256 hash;
  for (char c : text) hash.update(&c, 1);
  EXPECT_EQ(hash.hex_digest(), sha256_hex(text.data(), text.size()));
}

}  // namespace
}  // namespace arc
