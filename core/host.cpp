// host_name.
#include <arc/core/host.h>

#include <unistd.h>

namespace arc {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace arc
