// OutputFile.
#include <arc/base/output_file.h>

#include <arc/base/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace arc {
namespace {

// Writeback starts once this much is dirty: large enough for the disk's sequential speed, small
// enough that copying into the page cache and writing to the disk overlap (arc_bench_checkpoint's
// 839 MB on this project's 2-core VM: 2.1-2.7 GB/s to fsync's end, against 1.3-1.6 GB/s when
// fsync alone sends it to the disk).
constexpr size_t kWritebackPiece = 16 << 20;

}  // namespace

OutputFile::OutputFile(std::string target, std::string what, std::string elsewhere, std::string smaller)
    : target_(std::move(target)),
      path_(target_ + kTemporaryInfix + std::to_string(::getpid())),
      what_(std::move(what)),
      elsewhere_(std::move(elsewhere)),
      smaller_(std::move(smaller)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create");
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void OutputFile::write(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    errno = 0;
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    bytes += n;
    size -= static_cast<size_t>(n);
    offset_ += static_cast<size_t>(n);
  }
  if (offset_ - written_back_ >= kWritebackPiece) {
    // Only a start: its errors, if any, are fsync's to report in commit().
    ::sync_file_range(fd_, static_cast<off_t>(written_back_), static_cast<off_t>(offset_ - written_back_),
                      SYNC_FILE_RANGE_WRITE);
    written_back_ = offset_;
  }
}

void sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void OutputFile::commit() {
  if (::fsync(fd_) != 0) fail("flush");
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("close");
  if (::rename(path_.c_str(), target_.c_str()) != 0) fail("move into place");
  committed_ = true;
}

// A short write without errno (a full disk on some file systems) reads as "no space".
void OutputFile::fail(const char* action) const {
  const int error = errno != 0 ? errno : ENOSPC;
  std::string fix;
  switch (error) {
    case ENOSPC:
    case EDQUOT:
      fix = "free space on that file system, or write elsewhere (" + elsewhere_ + ")";
      break;
    case EFBIG:
      fix = "raise the file size limit (ulimit -f)" + (smaller_.empty() ? "" : " or " + smaller_);
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      fix = "make the folder writable, or write elsewhere (" + elsewhere_ + ")";
      break;
    default:
      fix = "check the health of that file system, or write elsewhere (" + elsewhere_ + ")";
  }
  ARC_FAIL("cannot ", action, " ", what_, " '", target_, "' (", std::strerror(error), " writing '", path_, "'); ", fix,
           ". The temporary file is removed and the previous '", target_, "', if any, is intact");
}

}  // namespace arc
