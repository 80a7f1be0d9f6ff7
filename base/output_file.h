// OutputFile: a file written whole. It is written under a temporary name, flushed to disk and then
// renamed onto its target, so that a crash or a full disk never leaves a half-written file and the
// previous file stays intact until the new one is complete. The disk writes it as it grows
// (writeback is started every few megabytes), so that commit() waits only for the last pieces.
#pragma once

#include <cstddef>
#include <string>

namespace arc {

/// What a file being written is called until it is complete: `<target>.tmp-<pid>`.
constexpr const char* kTemporaryInfix = ".tmp-";

/// Flushes `folder`'s entries to disk, so that a file renamed into it stays there after a power
/// loss; a folder that cannot be opened is left alone.
void sync_folder(const std::string& folder);

/// `<target>.tmp-<pid>` until commit(); removed unless committed. Every failure is an arc::Error
/// naming `what` ("checkpoint"), the target, the cause and the fix: `elsewhere` names the settings
/// that write it somewhere else, `smaller` (optional) how to make it smaller.
class OutputFile {
 public:
  /// Opens the temporary file for `target`; the other arguments word the errors (see above).
  OutputFile(std::string target, std::string what, std::string elsewhere, std::string smaller = "");
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  /// Appends `size` bytes.
  void write(const void* data, size_t size);
  /// Bytes written so far.
  size_t offset() const { return offset_; }
  /// Flushes the data to disk and moves the file into place.
  void commit();

 private:
  [[noreturn]] void fail(const char* action) const;

  std::string target_;
  std::string path_;
  std::string what_;
  std::string elsewhere_;
  std::string smaller_;
  int fd_ = -1;
  size_t offset_ = 0;
  // Bytes whose writeback has been started.
  size_t written_back_ = 0;
  bool committed_ = false;
};

}  // namespace arc
