// OrderedWorker: the queue on which the shared-memory collectives run, one at a time and in the
// order the training thread started them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace arc {

/// Runs jobs one at a time, in submission order, on its own thread or (`threaded` false) at
/// once on the caller's; after a job fails, every later one fails with the same error (the group
/// is out of step).
class OrderedWorker {
 public:
  explicit OrderedWorker(bool threaded);
  ~OrderedWorker();
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;

  /// Runs `job` after every job submitted before it; the future holds its outcome.
  std::shared_future<void> submit(std::function<void()> job);
  /// Set when the worker shuts down, so that a job waiting for other ranks can give up.
  const std::atomic<bool>& stopping() const { return stopping_; }
  /// Whether jobs run on a thread of the worker's own, not in submit.
  bool threaded() const { return thread_.joinable(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> jobs_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failed_;
  std::thread thread_;
};

}  // namespace arc
