#include "fuzz_target.h"

#include <arc/base/console.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace arc::fuzz {

std::map<std::string, Target>& targets() {
  static std::map<std::string, Target> all;
  return all;
}

bool add_target(const std::string& name, Target target) {
  targets().emplace(name, std::move(target));
  return true;
}

namespace {

// What the targets log of inputs they take (a resume, a warning about a config) is not a finding,
// and would bury one.
[[maybe_unused]] const bool quiet = (console().set_level(spdlog::level::err), true);

// Never destroyed, so that the removal at exit, which runs after static destructors, can read it.
const std::filesystem::path& scratch_folder() {
  static const auto* folder = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* path = new std::filesystem::path(std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                                           ("arc_fuzz_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_folder(), ignored);
    });
    return path;
  }();
  return *folder;
}

}  // namespace

std::string scratch_path(const std::string& name) { return (scratch_folder() / name).string(); }

std::string scratch_file(const std::string& name, std::string_view bytes) {
  const auto path = scratch_path(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<std::string> split(std::string_view bytes, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t at = 0; at <= bytes.size(); ++at) {
    if (at == bytes.size() || bytes[at] == separator) {
      parts.emplace_back(bytes.substr(begin, at - begin));
      begin = at + 1;
    }
  }
  return parts;
}

}  // namespace arc::fuzz
