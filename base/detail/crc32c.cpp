// CRC-32C: a table for single bytes and for machines without the instruction, SSE4.2 otherwise;
// and the polynomial arithmetic that joins the checksums of consecutive pieces.
#include <arc/base/detail/crc32c.h>

#include <arc/base/error.h>

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace arc {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // CRC-32C's, bit-reversed as the register holds it

struct Table {
  uint32_t entries[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1u)));
      entries[i] = crc;
    }
  }
};

uint32_t update_byte(uint32_t crc, uint8_t byte) {
  static const Table table;
  return table.entries[(crc ^ byte) & 0xFF] ^ (crc >> 8);
}

uint64_t update_word_portable(uint64_t crc, uint64_t word) {
  auto state = static_cast<uint32_t>(crc);
  for (int i = 0; i < 8; ++i) state = update_byte(state, static_cast<uint8_t>(word >> (8 * i)));
  return state;
}

// Four independent lanes over 32-byte groups; `groups` full groups at `data`.
void update_lanes_portable(std::array<uint64_t, 4>& lanes, const uint8_t* data, size_t groups) {
  for (size_t g = 0; g < groups; ++g)
    for (size_t lane = 0; lane < 4; ++lane) {
      uint64_t word;
      std::memcpy(&word, data + g * 32 + lane * 8, 8);
      lanes[lane] = update_word_portable(lanes[lane], word);
    }
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) void update_lanes_sse42(std::array<uint64_t, 4>& lanes, const uint8_t* data,
                                                          size_t groups) {
  uint64_t a = lanes[0], b = lanes[1], c = lanes[2], d = lanes[3];
  for (size_t g = 0; g < groups; ++g, data += 32) {
    uint64_t w[4];
    std::memcpy(w, data, 32);
    a = _mm_crc32_u64(a, w[0]);
    b = _mm_crc32_u64(b, w[1]);
    c = _mm_crc32_u64(c, w[2]);
    d = _mm_crc32_u64(d, w[3]);
  }
  lanes = {a, b, c, d};
}

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const uint8_t* data, size_t size) {
  uint64_t state = crc;
  for (; size >= 8; size -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    state = _mm_crc32_u64(state, word);
  }
  auto small = static_cast<uint32_t>(state);
  for (; size > 0; --size, ++data) small = _mm_crc32_u8(small, *data);
  return small;
}

bool has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

void update_lanes(std::array<uint64_t, 4>& lanes, const uint8_t* data, size_t groups) {
#if defined(__x86_64__)
  if (has_sse42()) return update_lanes_sse42(lanes, data, groups);
#endif
  update_lanes_portable(lanes, data, groups);
}

// a(x) b(x) modulo the polynomial, both in the register's order (bit 31 is x^0, bit 0 x^31).
uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if ((a & bit) != 0) product ^= b;
    b = (b & 1u) != 0 ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8 bytes) modulo the polynomial: a register fed `bytes` zero bytes is multiplied by it.
uint32_t zeros_factor(uint64_t bytes) {
  uint32_t factor = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8, then x^16, x^32, ...
  for (; bytes != 0; bytes >>= 1) {
    if ((bytes & 1) != 0) factor = multiply_mod(factor, square);
    square = multiply_mod(square, square);
  }
  return factor;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(0xFFFFFFFFu, bytes, size) ^ 0xFFFFFFFFu;
#endif
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = update_byte(crc, bytes[i]);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

void BlobChecksum::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  bytes_ += size;
  if (pending_size_ > 0) {
    const size_t take = std::min(size, pending_.size() - pending_size_);
    std::memcpy(pending_.data() + pending_size_, bytes, take);
    pending_size_ += take;
    bytes += take;
    size -= take;
    if (pending_size_ < pending_.size()) return;
    update_lanes(lanes_, pending_.data(), 1);
    pending_size_ = 0;
  }
  update_lanes(lanes_, bytes, size / 32);
  pending_size_ = size % 32;
  std::memcpy(pending_.data(), bytes + size - pending_size_, pending_size_);
}

// The register is linear in its start and in the bytes: fed B from a start s, it ends at
// s x^(8|B|) + crc(B from 0), and `next`, started from ~0 as every checksum is, at ~0 x^(8|B|) +
// crc(B from 0); so this lane's end is (lane + ~0) x^(8|B|) + next's lane, |B| the bytes of that lane.
void BlobChecksum::append(const BlobChecksum& next) {
  ARC_CHECK(pending_size_ == 0, "BlobChecksum::append needs the bytes summed before to be whole 32-byte groups, got ",
            bytes_, " bytes");
  const uint32_t factor = zeros_factor((next.bytes_ - next.pending_size_) / lanes_.size());
  for (size_t lane = 0; lane < lanes_.size(); ++lane)
    lanes_[lane] = multiply_mod(factor, static_cast<uint32_t>(lanes_[lane]) ^ 0xFFFFFFFFu) ^ next.lanes_[lane];
  pending_ = next.pending_;
  pending_size_ = next.pending_size_;
  bytes_ += next.bytes_;
}

std::string BlobChecksum::hex() const {
  auto lanes = lanes_;
  // The last partial group goes into the first lane byte by byte.
  auto tail = static_cast<uint32_t>(lanes[0]);
  for (size_t i = 0; i < pending_size_; ++i) tail = update_byte(tail, pending_[i]);
  lanes[0] = tail;
  char text[64];
  std::snprintf(text, sizeof(text), "%08x%08x%08x%08x-%llu", static_cast<uint32_t>(~lanes[0]),
                static_cast<uint32_t>(~lanes[1]), static_cast<uint32_t>(~lanes[2]), static_cast<uint32_t>(~lanes[3]),
                static_cast<unsigned long long>(bytes_));
  return text;
}

}  // namespace arc
