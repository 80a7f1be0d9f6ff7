// ShmSegment: creation, checks, cleanup and the futex step barrier.
#include <arc/strategies/detail/shm_segment.h>

#include <arc/base/error.h>
#include <arc/strategies/detail/spin.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <thread>

namespace arc {
namespace {

constexpr uint64_t kMagic = 0x31686d732d637261;  // "arc-shm1"
constexpr const char* kPrefix = "arc-shm-";
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kSleepSlice = std::chrono::milliseconds(50);

std::string random_hex() {
  std::random_device device;
  std::uniform_int_distribution<uint64_t> digits;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digits(device)));
  return text;
}

// Alive and not a zombie: a dead child stays visible to kill() until its parent reaps it.
bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

bool reached(uint32_t arrived, uint32_t step) { return static_cast<int32_t>(arrived - step) >= 0; }

}  // namespace

struct alignas(64) ShmSegment::Header {
  uint64_t magic = kMagic;
  int64_t local_world = 0;
  int64_t slot_bytes = 0;
  std::atomic<int32_t> attached{0};
};

struct alignas(64) ShmSegment::Peer {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> waiters{0};
  std::atomic<int32_t> pid{0};
  std::atomic<int32_t> global_rank{-1};
  // What the rank does at even and odd steps; written before `arrived`, read after it.
  std::atomic<uint64_t> doing[2] = {};
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory barriers need lock-free atomics");

size_t ShmSegment::header_bytes(int64_t local_world) {
  return page_aligned(sizeof(Header) + sizeof(Peer) * static_cast<size_t>(local_world));
}

size_t ShmSegment::total_bytes(int64_t local_world, int64_t slot_bytes) {
  return header_bytes(local_world) + 2 * static_cast<size_t>(local_world * slot_bytes);
}

ShmFile::ShmFile(std::string name, int fd, size_t size, bool linked)
    : name_(std::move(name)), size_(size), linked_(linked) {
  void* mapped = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (mapped == MAP_FAILED) {
    if (linked_) shm_unlink(name_.c_str());
    ARC_FAIL("cannot map the shared-memory file /dev/shm", name_, " of ", size_, " bytes (", std::strerror(error),
             "); free space in /dev/shm, or set shared_memory=false");
  }
  data_ = static_cast<std::byte*>(mapped);
}

ShmFile::~ShmFile() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
}

void ShmFile::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

std::unique_ptr<ShmFile> ShmFile::create(size_t bytes) {
  const std::string name = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-" + random_hex();
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ARC_CHECK(fd >= 0, "cannot create the shared-memory file /dev/shm", name, " (", std::strerror(errno),
            "); check that /dev/shm is mounted and writable, or set shared_memory=false");
  // posix_fallocate returns the error instead of setting errno.
  const int error =
      ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (error != 0) {
    close(fd);
    shm_unlink(name.c_str());
    ARC_FAIL("cannot make the shared-memory file /dev/shm", name, " ", bytes, " bytes long (", std::strerror(error),
             "); free space in /dev/shm (or mount it larger), or set shared_memory=false");
  }
  return std::unique_ptr<ShmFile>(new ShmFile(name, fd, bytes, true));
}

std::unique_ptr<ShmFile> ShmFile::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ARC_CHECK(fd >= 0, "cannot open the shared-memory file /dev/shm", name, " that local rank 0 created (",
            std::strerror(errno), "); all ranks of a node must run as one user in one /dev/shm, or set ",
            "shared_memory=false");
  struct stat info {};
  fstat(fd, &info);
  if (info.st_uid != geteuid() || (info.st_mode & 0777) != 0600 || static_cast<size_t>(info.st_size) != bytes) {
    close(fd);
    ARC_FAIL("the shared-memory file /dev/shm", name, " has owner ", info.st_uid, ", mode ", std::oct,
             (info.st_mode & 0777), std::dec, " and ", info.st_size, " bytes, but this job expects owner ", geteuid(),
             ", mode 600 and ", bytes, " bytes; another program may have taken its name: rerun the job");
  }
  return std::unique_ptr<ShmFile>(new ShmFile(name, fd, bytes, false));
}

ShmSegment::ShmSegment(std::unique_ptr<ShmFile> file, int64_t local_world, int64_t slot_bytes, int64_t local_index)
    : file_(std::move(file)),
      local_world_(local_world),
      slot_bytes_(slot_bytes),
      local_index_(local_index),
      base_(file_->data()),
      spin_(kSpin) {}

ShmSegment::~ShmSegment() = default;

std::unique_ptr<ShmSegment> ShmSegment::create(int64_t local_world, int64_t slot_bytes, int64_t global_rank) {
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(ShmFile::create(total_bytes(local_world, slot_bytes)), local_world, slot_bytes, 0));
  auto* header = new (segment->base_) Header();
  header->local_world = local_world;
  header->slot_bytes = slot_bytes;
  for (int64_t r = 0; r < local_world; ++r) new (&segment->peer(r)) Peer();
  segment->peer(0).pid = getpid();
  segment->peer(0).global_rank = static_cast<int32_t>(global_rank);
  header->attached.fetch_add(1);
  return segment;
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, int64_t local_world, int64_t slot_bytes,
                                             int64_t local_index, int64_t global_rank) {
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(ShmFile::open(name, total_bytes(local_world, slot_bytes)), local_world, slot_bytes, local_index));
  const auto* header = reinterpret_cast<const Header*>(segment->base_);
  ARC_CHECK(header->magic == kMagic && header->local_world == local_world && header->slot_bytes == slot_bytes,
            "the shared-memory segment /dev/shm", name, " is laid out for ", header->local_world, " ranks of ",
            header->slot_bytes, " bytes, but this rank expects ", local_world, " of ", slot_bytes,
            "; the ranks of this node disagree on the job: start them with the same settings");
  segment->peer(local_index).pid = getpid();
  segment->peer(local_index).global_rank = static_cast<int32_t>(global_rank);
  reinterpret_cast<Header*>(segment->base_)->attached.fetch_add(1);
  return segment;
}

int ShmSegment::remove_stale() {
  int removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(kPrefix, 0) != 0) continue;
    const auto pid = std::strtol(file.c_str() + std::strlen(kPrefix), nullptr, 10);
    struct stat info {};
    if (pid <= 0 || process_alive(static_cast<pid_t>(pid))) continue;
    if (stat(("/dev/shm/" + file).c_str(), &info) != 0 || info.st_uid != geteuid()) continue;
    if (shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

std::byte* ShmSegment::slot(int64_t set, int64_t local) const {
  return base_ + header_bytes(local_world_) + static_cast<size_t>((set * local_world_ + local) * slot_bytes_);
}

ShmSegment::Peer& ShmSegment::peer(int64_t local) const {
  return reinterpret_cast<Peer*>(base_ + sizeof(Header))[local];
}

void ShmSegment::unlink_when_attached(std::chrono::milliseconds timeout) {
  const auto& header = *reinterpret_cast<const Header*>(base_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (header.attached.load() < local_world_) {
    ARC_CHECK(std::chrono::steady_clock::now() < deadline, "only ", header.attached.load(), " of ", local_world_,
              " local ranks opened the shared-memory segment within ", std::chrono::duration<double>(timeout).count(),
              " s; check that every process of this node started");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  file_->unlink();
}

void ShmSegment::arrive_and_wait(uint32_t step, std::chrono::milliseconds timeout, const std::atomic<bool>& stop,
                                 const char* option, uint64_t doing) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto& me = peer(local_index_);
  me.doing[step & 1].store(doing, std::memory_order_relaxed);
  me.arrived.store(step);
  if (me.waiters.load() > 0) futex_wake_all(me.arrived);
  for (int64_t r = 0; r < local_world_; ++r)
    if (r != local_index_) wait_for(r, step, deadline, timeout, stop, option);
}

uint64_t ShmSegment::doing_of(int64_t local, uint32_t step) const {
  return peer(local).doing[step & 1].load(std::memory_order_relaxed);
}

int64_t ShmSegment::global_rank_of(int64_t local) const { return peer(local).global_rank.load(); }

// Spins briefly (peers usually arrive within microseconds), then, up to spin_, checks between
// yields of the core, then sleeps on the peer's counter in short slices, checking between them
// that the peer still lives and the deadline holds (spin.h says why not sleep at once).
void ShmSegment::wait_for(int64_t local, uint32_t step, std::chrono::steady_clock::time_point deadline,
                          std::chrono::milliseconds timeout, const std::atomic<bool>& stop, const char* option) {
  auto& other = peer(local);
  const auto start = std::chrono::steady_clock::now();
  while (!reached(other.arrived.load(std::memory_order_acquire), step)) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < kSpin) {
      cpu_relax();
      continue;
    }
    if (waited < spin_) {
      std::this_thread::yield();
      continue;
    }
    other.waiters.fetch_add(1);
    const uint32_t seen = other.arrived.load();
    if (!reached(seen, step)) futex_wait(other.arrived, seen, kSleepSlice);
    other.waiters.fetch_sub(1);
    if (reached(other.arrived.load(), step)) return;
    ARC_CHECK(!stop.load(), "the shared-memory collectives were shut down while waiting for rank ",
              other.global_rank.load());
    ARC_CHECK(process_alive(other.pid.load()), "rank ", other.global_rank.load(), " (pid ", other.pid.load(),
              ") exited during a shared-memory collective; see its log for the cause");
    ARC_CHECK(std::chrono::steady_clock::now() < deadline, "rank ", other.global_rank.load(),
              " did not reach shared-memory collective step ", step, " within the ",
              std::chrono::duration<double>(timeout).count(), " s timeout (", option, "); it may be stuck or ",
              "calling collectives in another order; raise ", option, " if it is only slow");
  }
}

}  // namespace arc
