// OrderedWorker.
#include <arc/strategies/detail/ordered_worker.h>

#include <arc/strategies/detail/spin.h>

namespace arc {

OrderedWorker::OrderedWorker(bool threaded, std::chrono::microseconds spin) : spin_(spin) {
  if (threaded) thread_ = std::thread([this] { run(); });
}

OrderedWorker::~OrderedWorker() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

std::shared_future<void> OrderedWorker::submit(std::function<void()> job) {
  std::packaged_task<void()> task([this, job = std::move(job)] {
    if (failed_) std::rethrow_exception(failed_);
    try {
      job();
    } catch (...) {
      failed_ = std::current_exception();
      throw;
    }
  });
  auto done = task.get_future().share();
  if (!thread_.joinable()) {
    task();
    return done;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(task));
  }
  // After the lock is free, so that the spinning thread, seeing it, takes the lock without sleeping.
  queued_.fetch_add(1, std::memory_order_release);
  ready_.notify_one();
  return done;
}

void OrderedWorker::wait(const std::shared_future<void>& done, std::chrono::microseconds spin) {
  spin_until([&] { return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }, spin);
  done.get();
}

void OrderedWorker::run() {
  while (true) {
    std::packaged_task<void()> task;
    spin_until([this] { return queued_.load(std::memory_order_acquire) > 0 || stopping_.load(); }, spin_);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      task = std::move(jobs_.front());
      jobs_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

}  // namespace arc
