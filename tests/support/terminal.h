// A command run on a pseudo-terminal of its own, as in a terminal window: what it prints is read
// from the terminal, and Ctrl-C typed there reaches its foreground process group (the command and
// every process it started) from the terminal driver, as a user's keystroke does.
#pragma once

#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace arc::testing {

class Terminal {
 public:
  explicit Terminal(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && status_ == kRunning) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }

  /// Types `keys` ("\x03" is Ctrl-C).
  void type(const std::string& keys) { ASSERT_EQ(write(master_, keys.data(), keys.size()), ssize_t(keys.size())); }

  /// Reads until `text` appears after `from` in the output; false after `seconds`.
  bool wait_for(const std::string& text, double seconds, size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (output_.find(text, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline || !read_some()) return false;
    }
    return true;
  }

  /// Reads until the command ends; its exit status (128 + the signal that ended it), or -1 when it
  /// runs on past `seconds`.
  int wait_exit(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (status_ == kRunning && std::chrono::steady_clock::now() < deadline) {
      int raw = 0;
      if (waitpid(pid_, &raw, WNOHANG) == pid_) {
        status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
        break;
      }
      if (!read_some()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (read_some()) {
    }
    return status_ == kRunning ? -1 : status_;
  }

 private:
  static constexpr int kRunning = -2;

  // Appends what the terminal has within 100 ms; false once nobody holds it open any more.
  bool read_some() {
    pollfd ready{master_, POLLIN, 0};
    if (poll(&ready, 1, 100) <= 0) return status_ == kRunning;
    char buffer[4096];
    const ssize_t n = read(master_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int master_ = -1;
  pid_t pid_ = -1;
  int status_ = kRunning;
  std::string output_;
};

}  // namespace arc::testing
