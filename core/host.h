// This machine's name, as the launchers, the shared-memory collectives and TensorBoard's file
// names use it.
#pragma once

#include <string>

namespace arc {

/// gethostname(), or "localhost" when the system gives none.
std::string host_name();

}  // namespace arc
