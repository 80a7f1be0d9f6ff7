// run_program.
#include <arc/base/detail/subprocess.h>

#include <arc/base/error.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <cstring>
#include <thread>

extern char** environ;

namespace arc {

int run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  ARC_CHECK(!argv.empty(), "run_program needs a program name");
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int failed = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  ARC_CHECK(failed == 0, "cannot start '", argv[0], "': ", std::strerror(failed), "; check that it is on PATH");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ARC_FAIL("'", argv[0], "' did not finish within ", timeout.count() / 1000.0, " s and was killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ARC_CHECK(WIFEXITED(status), "'", argv[0], "' was killed by signal ", WTERMSIG(status));
  return WEXITSTATUS(status);
}

}  // namespace arc
