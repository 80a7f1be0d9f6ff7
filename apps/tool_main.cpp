// Entry point of the `arc` tool: its launcher, which loads no LibTorch (apps/tool_launcher.h).
#include <arc/apps/tool_launcher.h>
#include <arc/base/error.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  // The command starts here, not when a rank of the engine starts (RunReport's t_first_step_s).
  const auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  setenv("ARC_COMMAND_START", std::to_string(now).c_str(), 1);
  std::string engine = "arc-engine";
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length > 0) {
    const std::string path(self, static_cast<size_t>(length));
    engine = path.substr(0, path.rfind('/') + 1) + engine;
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    const auto plan = arc::cli::spawn_plan(args);
    if (plan.world > 0) return arc::cli::run_ranks(engine, args, plan);
  } catch (const arc::Error& error) {
    std::cerr << "arc: error: " << error.what() << std::endl;
    return 2;
  }
  argv[0] = engine.data();
  execv(engine.c_str(), argv);
  std::cerr << "arc: error: cannot run " << engine << ": " << std::strerror(errno)
            << "; it belongs next to arc (CMake target arc_engine, built with arc)" << std::endl;
  return 2;
}
