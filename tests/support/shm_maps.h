// This process's mappings of Arclight's shared-memory files (shared buffers once their names are
// gone), read from /proc/self/maps.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace arc::testing {

/// The address ranges of the mapped files that this process made.
inline std::vector<std::pair<uintptr_t, uintptr_t>> shm_ranges() {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/dev/shm/arc-shm-" + std::to_string(getpid()) + "-") == std::string::npos) continue;
    const auto dash = line.find('-');
    ranges.emplace_back(std::stoull(line.substr(0, dash), nullptr, 16),
                        std::stoull(line.substr(dash + 1, line.find(' ') - dash - 1), nullptr, 16));
  }
  return ranges;
}

/// The sizes of those mappings.
inline std::vector<int64_t> shm_mappings() {
  std::vector<int64_t> sizes;
  for (const auto& [begin, end] : shm_ranges()) sizes.push_back(static_cast<int64_t>(end - begin));
  return sizes;
}

/// Whether `address` lies in one of them.
inline bool in_shm_mapping(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (const auto& [begin, end] : shm_ranges())
    if (begin <= at && at < end) return true;
  return false;
}

}  // namespace arc::testing
