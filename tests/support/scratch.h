// A temporary folder of the test process's own, for files whose commands outlive a scope (config
// files, torchrun's logs); removed when the process exits.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <string>
#include <system_error>

namespace arc::testing {

/// <temporary folder>/arc_test_<pid>, made on first use; removed at exit by the process that made
/// it (a forked child that exits leaves it).
inline const std::filesystem::path& process_scratch() {
  struct Folder {
    pid_t owner = getpid();
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("arc_test_" + std::to_string(owner));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ignored;
      if (getpid() == owner) std::filesystem::remove_all(path, ignored);
    }
  };
  static const Folder folder;
  return folder.path;
}

/// The folder `name` in process_scratch(), emptied and made afresh: a test's own folder, which an
/// earlier test of the same process that used the name leaves nothing in.
inline std::string fresh_folder(const std::string& name) {
  const auto path = process_scratch() / name;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path.string();
}

/// torchrun's flag that keeps its per-run log folders (by default new folders in /tmp that it never
/// removes) in the process's scratch folder.
inline std::string torchrun_log_dir() { return "--log_dir " + (process_scratch() / "torchrun").string(); }

}  // namespace arc::testing
