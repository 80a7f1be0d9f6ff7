// This machine's name, as the launchers, the shared-memory collectives and TensorBoard's file
// names use it.
#pragma once

#include <cstdint>
#include <string>

namespace arc {

/// gethostname(), or "localhost" when the system gives none.
std::string host_name();

/// The cores this process may run on (its CPU affinity, which containers and launchers narrow).
int64_t usable_cores();

}  // namespace arc
