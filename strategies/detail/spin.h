// Busy waiting, for what usually comes within microseconds, before a thread sleeps: waking a
// sleeping thread takes long on some machines (150 us and more on virtual ones, whose idle cores
// the host takes back), which a thread with a core of its own need not pay.
#pragma once

#include <chrono>
#include <thread>

namespace arc {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

/// Checks `done` until it holds or `limit` has passed.
template <typename Done>
void spin_until(Done done, std::chrono::microseconds limit) {
  if (done()) return;  // no clock read where nothing is awaited (collectives on the caller's thread)
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) cpu_relax();
}

}  // namespace arc
