// A file read by offset (pread), its size taken once when it is opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace arc::detail {

/// A file open for reading at any offset; every failure is an arc::Error naming it as `noun` does
/// ("checkpoint", "weights file"), a failed read with `fix` after it. Reads go through pread, not a
/// memory map: the kernel copies from the page cache through its own large pages, where touching a
/// mapping page by page costs a TLB miss per 4 KB (5x slower in a VM).
class ReadFile {
 public:
  ReadFile(std::string path, std::string noun, std::string fix);
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  ~ReadFile();

  /// Its size in bytes when it was opened.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  /// Reads `size` bytes at `offset` into `into`; a short file is an error.
  void read_at(uint64_t offset, void* into, size_t size) const;

 private:
  std::string path_, noun_, fix_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// The count of elements of `shape` times `item` bytes, or nullopt on overflow (or a size < 0): what
/// a file's tensor must hold before anything is allocated for it.
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, uint64_t item);

}  // namespace arc::detail
