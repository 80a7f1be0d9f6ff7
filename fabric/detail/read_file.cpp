#include <arc/fabric/detail/read_file.h>

#include <arc/base/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace arc::detail {

ReadFile::ReadFile(std::string path, std::string noun, std::string fix)
    : path_(std::move(path)), noun_(std::move(noun)), fix_(std::move(fix)) {
  // Non-blocking, so that a FIFO's open does not wait for a writer; it is refused below.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ARC_CHECK(fd_ >= 0, "cannot open ", noun_, " '", path_, "' (", std::strerror(errno),
            "); check the path and its permissions");
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    ARC_FAIL("cannot read the size of ", noun_, " '", path_, "' (", std::strerror(error), "); check the file system");
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    ARC_FAIL(noun_, " '", path_, "' is not a regular file (a folder, a device or a pipe); give the path of a file");
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

ReadFile::~ReadFile() { ::close(fd_); }

void ReadFile::read_at(uint64_t offset, void* into, size_t size) const {
  auto* bytes = static_cast<char*>(into);
  while (size > 0) {
    const ssize_t n = ::pread(fd_, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ARC_CHECK(n > 0, "cannot read ", noun_, " '", path_, "' (",
              n < 0 ? std::strerror(errno) : "it is shorter than when it was opened", "); ", fix_);
    bytes += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, uint64_t item) {
  uint64_t total = item;
  for (const int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    const auto d = static_cast<uint64_t>(dim);
    if (d != 0 && total > std::numeric_limits<uint64_t>::max() / d) return std::nullopt;
    total *= d;
  }
  return total;
}

}  // namespace arc::detail
