// AsyncCheckpointWriter: checkpoints written on a background thread from a host copy of their
// tensors, so that training goes on while the file is written (TrainerOptions::async_checkpointing).
#pragma once

#include <arc/fabric/checkpoint.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace arc {

/// Writes one checkpoint at a time in the background. The tensors are copied into a host buffer
/// that is kept between saves; the file is written with CheckpointWriter::write (atomic,
/// checksummed). Used by the Trainer; usable in a loop of one's own.
class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  /// Waits for the write in flight; a failure nobody took is printed as a warning.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  /// Copies `checkpoint`'s tensors and returns; `path` is written in the background. A save that
  /// finds a write in flight waits for it first (and says so, once), unless it holds the same data
  /// (a second file of the same step, such as last.ckpt): that file is written from the same copy.
  void save(CheckpointWriter checkpoint, const std::string& path);
  /// Runs `action` once every file asked for before is written: on the writing thread (an error it
  /// throws is a failed write), or at once on this one when none is pending (its error comes back
  /// here). Not at all once a write failed, so that what it would replace or remove stays. It must
  /// not save (save() would wait for it).
  void then(std::function<void()> action);
  /// Waits until every file asked for is written (or failed).
  void wait();
  /// Whether a file is being written now.
  bool writing() const;
  /// Whether a background write failed (until take_failure takes its error).
  bool failed() const;
  /// The error of the first background write that failed since the last call; nullopt when none did.
  std::optional<std::string> take_failure();
  /// Waits, then frees the host buffer (the next save allocates it again).
  void release();
  /// Seconds the last save() kept its caller: the wait for a write in flight, and the copy.
  double last_blocked_seconds() const { return last_blocked_seconds_; }

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::thread worker_;
  bool stopping_ = false;
  /// A file to write from data_ with its metadata, or an action of then().
  struct Job {
    std::string path;
    nlohmann::json meta;
    std::function<void()> action;
  };
  /// What is still to do; busy_ while a job runs or is due.
  std::deque<Job> files_;
  bool busy_ = false;
  /// Whether a write failed since the worker was last idle: the actions queued behind it are skipped.
  bool failed_since_idle_ = false;
  std::optional<CheckpointWriter> data_;
  std::string current_path_;
  std::string failure_;
  torch::Tensor buffer_;
  bool said_waiting_ = false;
  double last_blocked_seconds_ = 0;
};

}  // namespace arc
