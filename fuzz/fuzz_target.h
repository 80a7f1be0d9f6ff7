// One fuzz target: a function that takes any bytes and must either succeed or throw arc::Error (a
// rejection that names the problem); anything else (another exception, a crash, a sanitizer's
// report, a hang, a huge allocation) is a finding. ARC_FUZZ_TARGET(name) defines it; built with
// ARC_FUZZ_ENTRY (the libFuzzer executables), the file is also libFuzzer's entry point, and built
// without (the suite's replay test), the target is registered under `name`.
#pragma once

#include <arc/base/error.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace arc::fuzz {

using Target = std::function<void(std::string_view)>;

/// The targets registered in this program, by name.
std::map<std::string, Target>& targets();

/// Registers `target` as `name`; returns true (for a static initializer).
bool add_target(const std::string& name, Target target);

/// Writes `bytes` to scratch_path(name) (its suffix chooses a format) and returns that path.
std::string scratch_file(const std::string& name, std::string_view bytes);

/// The path of `name` in this process's scratch folder, which is removed when the process exits.
std::string scratch_path(const std::string& name);

/// `bytes` cut at each `separator`.
std::vector<std::string> split(std::string_view bytes, char separator);

/// Runs `body`, taking arc::Error (the expected rejection of bad input) as success.
template <typename Body>
void rejecting(Body&& body) {
  try {
    body();
  } catch (const arc::Error&) {
  }
}

}  // namespace arc::fuzz

#define ARC_FUZZ_CONCAT_INNER(a, b) a##b
#define ARC_FUZZ_CONCAT(a, b) ARC_FUZZ_CONCAT_INNER(a, b)

#ifdef ARC_FUZZ_ENTRY
#define ARC_FUZZ_TARGET(name)                                                                  \
  static void ARC_FUZZ_CONCAT(fuzz_, name)(std::string_view input);                            \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                    \
    ARC_FUZZ_CONCAT(fuzz_, name)(std::string_view(reinterpret_cast<const char*>(data), size)); \
    return 0;                                                                                  \
  }                                                                                            \
  static void ARC_FUZZ_CONCAT(fuzz_, name)(std::string_view input)
#else
#define ARC_FUZZ_TARGET(name)                                             \
  static void ARC_FUZZ_CONCAT(fuzz_, name)(std::string_view input);       \
  [[maybe_unused]] static const bool ARC_FUZZ_CONCAT(registered_, name) = \
      ::arc::fuzz::add_target(#name, ARC_FUZZ_CONCAT(fuzz_, name));       \
  static void ARC_FUZZ_CONCAT(fuzz_, name)(std::string_view input)
#endif
