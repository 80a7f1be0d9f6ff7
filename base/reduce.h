// Reduce: how values from several ranks, or several steps, combine into one.
#pragma once

namespace arc {

/// How values combine: across ranks (all_reduce) or across steps (epoch metrics).
enum class Reduce { mean, sum, max, min };

}  // namespace arc
