// The message of the arc::Error that `fn` throws, or "" when it throws none.
#pragma once

#include <arc/base/error.h>

#include <functional>
#include <string>

namespace arc::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace arc::testing
