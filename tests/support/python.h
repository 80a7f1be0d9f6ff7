// The Python that runs PyTorch's side of a comparison, for the tests and the bench apps alike.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace arc::testing {

/// Whether `python` imports `module`.
inline bool imports(const std::string& python, const std::string& module) {
  return std::system((python + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0;
}

/// $ARC_BENCH_PYTHON, else the first of /usr/bin/python3 (Debian's python3-torch) and the python3 on
/// PATH (a pip PyTorch's virtual environment, as on the GPU machine) that imports torch; "" when none does.
inline std::string python_with_torch() {
  std::vector<std::string> candidates = {"/usr/bin/python3", "python3"};
  if (const char* chosen = std::getenv("ARC_BENCH_PYTHON")) candidates.insert(candidates.begin(), chosen);
  for (const auto& python : candidates)
    if (imports(python, "torch")) return python;
  return "";
}

/// What a test that needs python_with_torch() says when there is none.
inline constexpr const char* kNoPythonWithTorch =
    "no python3 imports torch: install Debian's python3-torch (scripts/install-deps.sh --tests), or set "
    "ARC_BENCH_PYTHON to a python3 that does";

}  // namespace arc::testing
