// Files that declare more than they hold: a tensor larger than the file, data or an index past its
// end, an index length that wraps around, a safetensors header of a terabyte, a zip directory of a
// billion entries. Each load runs in a child process whose data segment may grow by the file's size
// plus 64 MiB only (RLIMIT_DATA: the heap and every private mapping), and must end in an
// arc::Error: a reader that allocated what a file declares would fail otherwise, with an
// out-of-memory error. The same loads of honest files succeed under the same limit.
#include "checkpoint_file.h"

#include <arc/fabric/checkpoint.h>
#include <arc/fabric/weights.h>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSlack = 64ull << 20;

// How a load in a child process under the limit ended.
enum class Ended { kLoaded, kArcError, kOtherError, kKilled };

uint64_t data_segment_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmData:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

Ended load_limited(const std::string& path, const std::function<void(const std::string&)>& load) {
  const uint64_t limit = data_segment_bytes() + fs::file_size(path) + kSlack;
  const pid_t child = ::fork();
  if (child < 0) return Ended::kKilled;
  if (child == 0) {
    ::alarm(120);  // a load that hangs ends as killed
    const rlimit data{limit, limit};
    if (::setrlimit(RLIMIT_DATA, &data) != 0) ::_exit(3);
    try {
      load(path);
      ::_exit(0);
    } catch (const arc::Error& error) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), error.what());
      ::_exit(1);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s: not an arc::Error: %s\n", path.c_str(), error.what());
      ::_exit(2);
    }
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 3) return Ended::kKilled;
  return WEXITSTATUS(status) == 0 ? Ended::kLoaded : WEXITSTATUS(status) == 1 ? Ended::kArcError : Ended::kOtherError;
}

void read_checkpoint(const std::string& path) {
  const arc::CheckpointReader reader(path);
  for (const auto& name : reader.tensor_names()) (void)reader.tensor(name);
}

void read_weights(const std::string& path) { (void)arc::read_weights(path); }

class HostileSizes : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("arc_hostile_" + std::to_string(::getpid()));
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const auto path = (folder_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // A checkpoint of one float tensor "model/w" of `shape`, whose entry says `bytes` at offset 16, and
  // 16 bytes of data.
  std::string checkpoint(const std::string& name, const std::vector<int64_t>& shape, uint64_t bytes) {
    const nlohmann::json index = {
        {"meta", nlohmann::json::object()},
        {"entries",
         {{"model/w", {{"kind", "tensor"}, {"dtype", "Float"}, {"shape", shape}, {"offset", 16}, {"bytes", bytes}}}}}};
    return write(name, arc::fuzz::checkpoint_file(3, index.dump(), std::string(16, '\1')));
  }

  fs::path folder_;
};

TEST_F(HostileSizes, CheckpointsFailBeforeAllocatingWhatTheyDeclare) {
  EXPECT_EQ(load_limited(checkpoint("honest.ckpt", {4}, 16), read_checkpoint), Ended::kLoaded);
  // A terabyte-sized tensor over 16 bytes of data; its bytes past the file's end; a negative size.
  EXPECT_EQ(load_limited(checkpoint("shape.ckpt", {1 << 20, 1 << 18}, 16), read_checkpoint), Ended::kArcError);
  EXPECT_EQ(load_limited(checkpoint("bytes.ckpt", {1 << 20, 1 << 18}, 1ull << 40), read_checkpoint), Ended::kArcError);
  EXPECT_EQ(load_limited(checkpoint("negative.ckpt", {-4, -1}, 16), read_checkpoint), Ended::kArcError);
  // An index whose length wraps the trailer's arithmetic around, so that it seems to end at the file's end.
  auto file = arc::fuzz::checkpoint_file(3, R"({"meta":{},"entries":{}})", "");
  const uint64_t offset = 1ull << 63, length = (1ull << 63) + file.size() - 32;  // offset + length + 32 wraps
  std::memcpy(&file[file.size() - 32], &offset, 8);
  std::memcpy(&file[file.size() - 24], &length, 8);
  EXPECT_EQ(load_limited(write("wraps.ckpt", file), read_checkpoint), Ended::kArcError);
}

TEST_F(HostileSizes, WeightsFilesFailBeforeAllocatingWhatTheyDeclare) {
  const auto safetensors = [](const nlohmann::json& header, uint64_t declared, const std::string& data) {
    const auto text = header.dump();
    std::string file(reinterpret_cast<const char*>(&declared), 8);
    return file + text + data;
  };
  const nlohmann::json honest = {{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}};
  const auto size = honest.dump().size();
  EXPECT_EQ(load_limited(write("honest.safetensors", safetensors(honest, size, std::string(16, '\1'))), read_weights),
            Ended::kLoaded);
  // A header of a terabyte; a tensor of a terabyte over 16 bytes.
  EXPECT_EQ(
      load_limited(write("header.safetensors", safetensors(honest, 1ull << 40, std::string(16, '\1'))), read_weights),
      Ended::kArcError);
  const nlohmann::json huge = {{"w", {{"dtype", "F32"}, {"shape", {1 << 20, 1 << 18}}, {"data_offsets", {0, 16}}}}};
  EXPECT_EQ(load_limited(write("shape.safetensors", safetensors(huge, huge.dump().size(), std::string(16, '\1'))),
                         read_weights),
            Ended::kArcError);
  // A .pt (a zip archive: a first record's header) whose zip64 directory declares a billion entries.
  std::string first(30, '\0');
  std::memcpy(&first[0], "PK\x03\x04", 4);
  std::string zip64(56, '\0');
  std::memcpy(&zip64[0], "PK\x06\x06", 4);
  const uint64_t count = 1000000000, dir_bytes = 46000000000ull, dir_offset = 0;
  std::memcpy(&zip64[32], &count, 8);
  std::memcpy(&zip64[40], &dir_bytes, 8);
  std::memcpy(&zip64[48], &dir_offset, 8);
  std::string locator(20, '\0');
  std::memcpy(&locator[0], "PK\x06\x07", 4);
  const uint64_t zip64_at = first.size();
  std::memcpy(&locator[8], &zip64_at, 8);
  std::string end(22, '\0');
  std::memcpy(&end[0], "PK\x05\x06", 4);
  std::memset(&end[8], 0xFF, 12);  // counts, size and offset saturated: the zip64 record holds them
  EXPECT_EQ(load_limited(write("billion.pt", first + zip64 + locator + end), read_weights), Ended::kArcError);
}

}  // namespace
