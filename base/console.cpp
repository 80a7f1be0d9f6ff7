// The console logger.
#include <arc/base/console.h>

#include <c10/util/Exception.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
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

bool first_of_launch() {
  for (const char* variable : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
    if (const char* rank = std::getenv(variable); rank != nullptr) return std::string(rank) == "0";
  return true;
}

std::string message_of(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  const char* show = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  if (torch_error == nullptr || (show != nullptr && std::string(show) == "1")) return error.what();
  return torch_error->what_without_backtrace();
}

}  // namespace arc
