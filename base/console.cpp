// The console logger.
#include <arc/base/console.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace arc {

spdlog::logger& console() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto made = spdlog::stderr_color_mt("arc");
    made->set_pattern("[arc] %^%l%$: %v");
    return made;
  }();
  return *logger;
}

void set_console_rank(int64_t rank, int64_t world_size) {
  auto& logger = console();
  if (world_size > 1) logger.set_pattern("[arc rank " + std::to_string(rank) + "] %^%l%$: %v");
  logger.set_level(rank == 0 ? spdlog::level::info : spdlog::level::warn);
}

}  // namespace arc
