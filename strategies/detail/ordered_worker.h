// OrderedWorker: the queue on which the shared-memory collectives run, one at a time and in the
// order the training thread started them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace arc {

/// Runs jobs one at a time, in submission order, on its own thread or (`threaded` false) at
/// once on the caller's; after a job fails, every later one fails with the same error (the group
/// is out of step). With a `spin`, the worker's thread checks for the next job that long before it
/// sleeps, and wait() checks for a job's end that long before the caller sleeps: a thread that
/// sleeps between the collectives of every step pays a wake-up each time.
class OrderedWorker {
 public:
  explicit OrderedWorker(bool threaded, std::chrono::microseconds spin = {});
  ~OrderedWorker();
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;

  /// Runs `job` after every job submitted before it; the future holds its outcome.
  std::shared_future<void> submit(std::function<void()> job);
  /// Runs `job` after every job submitted before it and waits for it.
  void call(std::function<void()> job) { wait(submit(std::move(job)), spin_); }
  /// Waits for a submitted job (rethrowing its error), checking for `spin` before it sleeps.
  static void wait(const std::shared_future<void>& done, std::chrono::microseconds spin);
  std::chrono::microseconds spin() const { return spin_; }
  /// Set when the worker shuts down, so that a job waiting for other ranks can give up.
  const std::atomic<bool>& stopping() const { return stopping_; }
  /// Whether jobs run on a thread of the worker's own, not in submit.
  bool threaded() const { return thread_.joinable(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> jobs_;
  // Jobs submitted and not yet taken, for the spin, which reads it without the lock; a hint only
  // (briefly -1 when the thread takes a job before submit counts it): the lock decides.
  std::atomic<int64_t> queued_{0};
  std::chrono::microseconds spin_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failed_;
  std::thread thread_;
};

}  // namespace arc
