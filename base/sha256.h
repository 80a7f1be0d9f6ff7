// SHA-256 (FIPS 180-4), for parameter digests and data checks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace arc {

/// Incremental SHA-256: update() any number of times, then hex_digest().
class Sha256 {
 public:
  /// An empty message's state.
  Sha256();
  /// Adds `size` bytes at `data` to the message.
  void update(const void* data, size_t size);
  /// Lower-case hex of the digest; the object is finished afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

/// SHA-256 of a byte range, as hex.
std::string sha256_hex(const void* data, size_t size);

}  // namespace arc
