// The fuzz targets in the ordinary suite. Each takes its seeds (written afresh by this build, so they
// are in the current formats), the inputs kept in fuzz/regressions/<target>/ (what fuzzing found
// once, fixed since), and mutations of each seed made by a fixed generator: a short, repeatable
// fuzzing run, without libFuzzer's guidance and the sanitizers that scripts/fuzz.sh brings.
#include "fuzz_target.h"
#include "seeds.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;

const std::string& seeds_folder() {
  static const std::string folder = [] {
    const auto path = arc::fuzz::scratch_path("seeds");
    arc::fuzz::write_seeds(path, ARC_SOURCE_DIR);
    return path;
  }();
  return folder;
}

std::vector<fs::path> files_in(const fs::path& folder) {
  std::vector<fs::path> files;
  if (fs::is_directory(folder))
    for (const auto& entry : fs::directory_iterator(folder)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// splitmix64 (WORKLOAD.md's generator).
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// One to four of libFuzzer's simplest mutations: a byte changed, set to an edge value, inserted or
// erased, a run erased or repeated, a decimal digit changed.
std::string mutated(std::string bytes, Random& random) {
  static const char kEdges[] = {'\0', '\x01', '\x7f', '\x80', '\xff', '-', '9', '"', '{', '['};
  for (size_t k = 1 + random.below(4); k > 0; --k) {
    const size_t at = random.below(bytes.size() + 1);
    switch (random.below(6)) {
      case 0:
        if (at < bytes.size()) bytes[at] = static_cast<char>(bytes[at] ^ (1 << random.below(8)));
        break;
      case 1:
        if (at < bytes.size()) bytes[at] = kEdges[random.below(sizeof(kEdges))];
        break;
      case 2:
        bytes.insert(at, 1, static_cast<char>(random.below(256)));
        break;
      case 3:
        bytes.erase(at, 1 + random.below(16));
        break;
      case 4:
        if (at < bytes.size()) bytes.insert(at, bytes.substr(at, 1 + random.below(16)));
        break;
      default:
        for (size_t i = at; i < bytes.size(); ++i)
          if (bytes[i] >= '0' && bytes[i] <= '9') {
            bytes[i] = static_cast<char>('0' + random.below(10));
            break;
          }
    }
  }
  return bytes;
}

class FuzzReplay : public ::testing::TestWithParam<std::string> {
 protected:
  // Runs the target; anything but success or arc::Error fails the test, and the input is kept.
  void take(const std::string& bytes, const std::string& what) {
    try {
      arc::fuzz::targets().at(GetParam())(bytes);
    } catch (const std::exception& error) {
      const auto kept =
          fs::temp_directory_path() / ("arc_fuzz_" + GetParam() + "_failure_" + std::to_string(failures_++));
      std::ofstream(kept, std::ios::binary) << bytes;
      ADD_FAILURE() << what << ": " << error.what() << " (the input is kept in " << kept.string() << ")";
    }
  }

 private:
  int failures_ = 0;
};

constexpr int kMutantsPerSeed = 400;

TEST_P(FuzzReplay, TakesItsSeedsKeptInputsAndMutations) {
  ASSERT_EQ(arc::fuzz::targets().count(GetParam()), 1u);
  const auto seeds = files_in(fs::path(seeds_folder()) / GetParam());
  ASSERT_FALSE(seeds.empty());
  for (const auto& path : files_in(fs::path(ARC_SOURCE_DIR) / "fuzz/regressions" / GetParam()))
    take(read_file(path), "kept input " + path.string());
  Random random{std::hash<std::string>()(GetParam())};
  for (const auto& path : seeds) {
    const auto seed = read_file(path);
    take(seed, "seed " + path.filename().string());
    for (int m = 0; m < kMutantsPerSeed; ++m)
      take(mutated(seed, random), "mutant " + std::to_string(m) + " of seed " + path.filename().string());
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay,
                         ::testing::Values("checkpoint", "weights", "config", "command_line", "cluster"),
                         [](const auto& info) { return info.param; });

}  // namespace
