// Reduction kernels, compiled with -O3 (see CMakeLists.txt) so that the loops vectorize.
#include <arc/strategies/detail/shm_reduce.h>

#include <arc/base/error.h>
#include <arc/base/reduce.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>

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

// What becomes of a combined element before it is stored: nothing, or (for a mean) division by
// the number of ranks, rounded as torch's div_ rounds: in the element type, through float for the
// 16-bit ones.
struct Keep {
  template <typename T>
  T operator()(T value) const {
    return value;
  }
};
struct DivideBy {
  double divisor;
  template <typename T>
  T operator()(T value) const {
    using Math = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>, float, T>;
    return static_cast<T>(static_cast<Math>(value) / static_cast<Math>(divisor));
  }
};

// Block by block through an accumulator on the stack, which keeps the block in L1 and lets `out`
// be one of the sources: a block is written only after every source of it was read. 16-bit floats
// accumulate in float and round once; the other types in their own.
template <typename T, typename Op, typename Finish>
void combine_blocks(T* out, const std::vector<const void*>& sources, int64_t count, Op op, Finish finish) {
  using Acc = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>, float, T>;
  constexpr int64_t kBlock = 1024;
  Acc acc[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    const T* __restrict first = static_cast<const T*>(sources[0]) + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<Acc>(first[i]);
    for (size_t s = 1; s < sources.size(); ++s) {
      const T* __restrict next = static_cast<const T*>(sources[s]) + begin;
      for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], static_cast<Acc>(next[i]));
    }
    T* __restrict target = out + begin;
    for (int64_t i = 0; i < n; ++i) target[i] = finish(static_cast<T>(acc[i]));
  }
}

// Two sources of a full-precision type, the common case: one pass, a third faster than through
// the accumulator. No __restrict: `out` may be either source, and each element is read before it
// is written, which the compiler's overlap check lets through to the vector loop. With GCC on
// x86-64 it is compiled twice, for AVX2 and for the baseline, and the processor picks at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ARC_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define ARC_AVX2_CLONE
#endif
template <typename T, typename Op, typename Finish>
ARC_AVX2_CLONE void combine_two(T* out, const T* a, const T* b, int64_t count, Op op, Finish finish) {
  for (int64_t i = 0; i < count; ++i) out[i] = finish(op(a[i], b[i]));
}

template <typename T, typename Op, typename Finish = Keep>
void combine_with(T* out, const std::vector<const void*>& sources, int64_t count, Op op, Finish finish = {}) {
  if constexpr (!std::is_same_v<T, c10::Half> && !std::is_same_v<T, c10::BFloat16>) {
    if (sources.size() == 2)
      return combine_two(out, static_cast<const T*>(sources[0]), static_cast<const T*>(sources[1]), count, op, finish);
  }
  combine_blocks(out, sources, count, op, finish);
}

template <typename T>
void combine_op(Reduce op, void* out, const std::vector<const void*>& sources, int64_t count) {
  switch (op) {
    case Reduce::max:
      return combine_with(static_cast<T*>(out), sources, count, Max{});
    case Reduce::min:
      return combine_with(static_cast<T*>(out), sources, count, Min{});
    case Reduce::sum:
      return combine_with(static_cast<T*>(out), sources, count, Sum{});
    case Reduce::mean:
      if constexpr (std::is_integral_v<T>) {
        ARC_FAIL("the mean of integers cannot be held in their type; reduce with sum");
      } else {
        return combine_with(static_cast<T*>(out), sources, count, Sum{}, DivideBy{static_cast<double>(sources.size())});
      }
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
