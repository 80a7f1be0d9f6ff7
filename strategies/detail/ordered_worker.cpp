// OrderedWorker.
#include <arc/strategies/detail/ordered_worker.h>

namespace arc {

OrderedWorker::OrderedWorker(bool threaded) {
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
  ready_.notify_one();
  return done;
}

void OrderedWorker::run() {
  while (true) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      task = std::move(jobs_.front());
      jobs_.pop_front();
    }
    task();
  }
}

}  // namespace arc
