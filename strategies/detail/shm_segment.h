// ShmSegment: the POSIX shared-memory segment that the ranks of one node share for their
// collectives, and the step barrier on it (spin, then futex) that notices dead peers and gives
// up at a deadline instead of hanging. ShmFile: one mapped file in /dev/shm, the segment's and
// that of each buffer the ranks share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace arc {

/// `bytes` rounded up to whole pages, so that what follows starts on a page (and cache line) of its own.
inline size_t page_aligned(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

/// A POSIX shared-memory file of this user (mode 0600), mapped; named after its creator's pid, so
/// that ShmSegment::remove_stale finds what a crashed run left behind.
class ShmFile {
 public:
  /// Creates and maps a file of `bytes`, its memory reserved at once (a full /dev/shm fails here
  /// instead of killing a later write with SIGBUS).
  static std::unique_ptr<ShmFile> create(size_t bytes);
  /// Opens and maps the file `name` of `bytes` that another rank created, checking owner, mode and size.
  static std::unique_ptr<ShmFile> open(const std::string& name, size_t bytes);
  ~ShmFile();
  ShmFile(const ShmFile&) = delete;
  ShmFile& operator=(const ShmFile&) = delete;

  const std::string& name() const { return name_; }
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  /// Removes the name (the mapping stays); the creator's destructor does it otherwise.
  void unlink();

 private:
  ShmFile(std::string name, int fd, size_t size, bool linked);

  std::string name_;
  size_t size_;
  std::byte* data_ = nullptr;
  bool linked_;
};

/// One segment per node: a header, then two sets of one slot per local rank (collectives
/// alternate between the sets, so one barrier per step suffices).
class ShmSegment {
 public:
  /// Creates a fresh segment (mode 0600) for `local_world` ranks; this process is local index 0.
  static std::unique_ptr<ShmSegment> create(int64_t local_world, int64_t slot_bytes, int64_t global_rank);
  /// Opens the segment `name` created by the node's first rank, checking owner, mode and size.
  static std::unique_ptr<ShmSegment> open(const std::string& name, int64_t local_world, int64_t slot_bytes,
                                          int64_t local_index, int64_t global_rank);
  /// Removes segments that crashed runs of this user left behind; returns how many.
  static int remove_stale();
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return file_->name(); }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t local_world() const { return local_world_; }
  int64_t local_index() const { return local_index_; }
  /// Rank `local`'s slot in set `set` (0 or 1).
  std::byte* slot(int64_t set, int64_t local) const;
  /// Waits until every local rank has opened the segment, then removes its name, so that no
  /// crash from here on can leave it behind.
  void unlink_when_attached(std::chrono::milliseconds timeout);
  /// Marks this rank as arrived at step `step`, doing `doing` (what the step is part of, for
  /// doing_of), and waits until every local rank has. Throws when a peer exits, when `timeout`
  /// passes (naming who is missing and `option`, the setting that gave the timeout), or when `stop`
  /// is set.
  void arrive_and_wait(uint32_t step, std::chrono::milliseconds timeout, const std::atomic<bool>& stop,
                       const char* option = "timeout", uint64_t doing = 0);
  /// What rank `local` said it was doing when it arrived at `step`, which every rank has passed (a
  /// rank runs at most one step ahead, so the value stays until this rank's next step).
  uint64_t doing_of(int64_t local, uint32_t step) const;
  /// The global rank of local rank `local`.
  int64_t global_rank_of(int64_t local) const;
  /// How long a rank waiting for another keeps checking before it sleeps (20 us unless set): past
  /// the first 20 us it yields its core to any other thread that wants it while it checks.
  void spin_before_sleeping(std::chrono::microseconds spin) { spin_ = spin; }
  std::chrono::microseconds spin_before_sleeping() const { return spin_; }

 private:
  struct Header;
  struct Peer;
  ShmSegment(std::unique_ptr<ShmFile> file, int64_t local_world, int64_t slot_bytes, int64_t local_index);
  Peer& peer(int64_t local) const;
  // Waits for one peer until `deadline`; `timeout` and `option` are what the error reports.
  void wait_for(int64_t local, uint32_t step, std::chrono::steady_clock::time_point deadline,
                std::chrono::milliseconds timeout, const std::atomic<bool>& stop, const char* option);
  static size_t header_bytes(int64_t local_world);
  static size_t total_bytes(int64_t local_world, int64_t slot_bytes);

  std::unique_ptr<ShmFile> file_;
  int64_t local_world_;
  int64_t slot_bytes_;
  int64_t local_index_;
  std::byte* base_;
  std::chrono::microseconds spin_;
};

}  // namespace arc
