// host_name and usable_cores.
#include <arc/base/detail/host.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace arc {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1U, std::thread::hardware_concurrency());
}

}  // namespace arc
