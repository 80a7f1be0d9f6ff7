// Integers read back from JSON that a file or another process gave (checkpoint metadata, states).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace arc::detail {

/// The counts a checkpoint keeps (steps, epochs, positions) stay below 2^53, the integers a double
/// holds exactly, so that adding to one never overflows.
constexpr int64_t kLargestCount = int64_t{1} << 53;

/// `value` as an integer from `low` to `high`. Anything else (a float, whose conversion to an integer
/// is undefined outside int64's range, text, a number out of range) throws std::out_of_range naming
/// `what`, which reading_checkpoint reports as a corrupt checkpoint naming its file.
inline int64_t json_integer(const nlohmann::json& value, const std::string& what, int64_t low = 0,
                            int64_t high = kLargestCount) {
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() <= static_cast<uint64_t>(high) &&
                                                         static_cast<int64_t>(value.get<uint64_t>()) >= low
                        : value.is_number_integer() ? value.get<int64_t>() >= low && value.get<int64_t>() <= high
                                                    : false;
  if (!in_range)
    throw std::out_of_range(what + " is " + value.dump() + ", not an integer from " + std::to_string(low) + " to " +
                            std::to_string(high));
  return value.get<int64_t>();
}

}  // namespace arc::detail
