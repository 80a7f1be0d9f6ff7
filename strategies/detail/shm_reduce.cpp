// Reduction kernels, compiled with -O3 (see CMakeLists.txt) so that the loops vectorize.
#include <arc/strategies/detail/shm_reduce.h>

#include <arc/base/error.h>
#include <arc/base/reduce.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

namespace arc {
namespace {

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

// Full-precision types: one pass per source, each a vectorizable loop.
template <typename T, typename Op>
void combine_native(T* __restrict out, const std::vector<const void*>& sources, int64_t count, Op op) {
  const T* __restrict a = static_cast<const T*>(sources[0]);
  const T* __restrict b = static_cast<const T*>(sources[1]);
  for (int64_t i = 0; i < count; ++i) out[i] = op(a[i], b[i]);
  for (size_t s = 2; s < sources.size(); ++s) {
    const T* __restrict c = static_cast<const T*>(sources[s]);
    for (int64_t i = 0; i < count; ++i) out[i] = op(out[i], c[i]);
  }
}

// 16-bit floats: accumulate in float, round once.
template <typename T, typename Op>
void combine_half(T* __restrict out, const std::vector<const void*>& sources, int64_t count, Op op) {
  constexpr int64_t kBlock = 512;
  float acc[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    const T* first = static_cast<const T*>(sources[0]) + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<float>(first[i]);
    for (size_t s = 1; s < sources.size(); ++s) {
      const T* next = static_cast<const T*>(sources[s]) + begin;
      for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], static_cast<float>(next[i]));
    }
    for (int64_t i = 0; i < n; ++i) out[begin + i] = static_cast<T>(acc[i]);
  }
}

template <typename T, typename Op>
void combine_typed(void* out, const std::vector<const void*>& sources, int64_t count, Op op) {
  if constexpr (std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>) {
    combine_half(static_cast<T*>(out), sources, count, op);
  } else {
    combine_native(static_cast<T*>(out), sources, count, op);
  }
}

template <typename T>
void combine_op(Reduce op, void* out, const std::vector<const void*>& sources, int64_t count) {
  switch (op) {
    case Reduce::max:
      return combine_typed<T>(out, sources, count, Max{});
    case Reduce::min:
      return combine_typed<T>(out, sources, count, Min{});
    case Reduce::sum:
    case Reduce::mean:
      return combine_typed<T>(out, sources, count, Sum{});
  }
}

}  // namespace

bool shm_reducible(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat:
    case c10::kDouble:
    case c10::kHalf:
    case c10::kBFloat16:
    case c10::kInt:
    case c10::kLong:
      return true;
    default:
      return false;
  }
}

void combine(c10::ScalarType type, Reduce op, void* out, const std::vector<const void*>& sources, int64_t count) {
  ARC_CHECK(sources.size() >= 2, "combine needs at least two sources, got ", sources.size());
  switch (type) {
    case c10::kFloat:
      return combine_op<float>(op, out, sources, count);
    case c10::kDouble:
      return combine_op<double>(op, out, sources, count);
    case c10::kHalf:
      return combine_op<c10::Half>(op, out, sources, count);
    case c10::kBFloat16:
      return combine_op<c10::BFloat16>(op, out, sources, count);
    case c10::kInt:
      return combine_op<int32_t>(op, out, sources, count);
    case c10::kLong:
      return combine_op<int64_t>(op, out, sources, count);
    default:
      ARC_FAIL("the shared-memory all-reduce has no kernel for ", c10::toString(type),
               "; use float, double, half, bfloat16, int or long tensors");
  }
}

}  // namespace arc
