// The element-wise kernels of the shared-memory all-reduce: combine the slots of every local
// rank, always in rank order, so that every rank computes the same bits.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace arc {

enum class Reduce;

/// Whether combine() handles this element type.
bool shm_reducible(c10::ScalarType type);

/// out[i] = sources[0][i] (op) sources[1][i] (op) ... for i < count; half types accumulate in
/// float and round once. A mean is that sum divided by the number of sources, as torch's div_
/// divides it. `out` may be one of the sources (but not overlap one at an offset).
void combine(c10::ScalarType type, Reduce op, void* out, const std::vector<const void*>& sources, int64_t count);

}  // namespace arc
