// Reduce: how values from several ranks, or several steps, combine into one.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace arc {

/// How values combine: across ranks (all_reduce) or across steps (epoch metrics).
enum class Reduce { mean, sum, max, min };

/// A hash of `names` (40 bits) that a double holds exactly, even summed over thousands of ranks:
/// sent after values that the ranks gather or reduce by name, it shows ranks whose names differ,
/// which would otherwise combine one name's values with another's.
inline double names_hash(const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& name : names) (joined += name) += '\0';
  return static_cast<double>(std::hash<std::string>{}(joined) >> 24);
}

}  // namespace arc
