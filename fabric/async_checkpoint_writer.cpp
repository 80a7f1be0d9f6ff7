// AsyncCheckpointWriter: the caller copies, one worker thread writes.
#include <arc/fabric/async_checkpoint_writer.h>

#include <arc/base/console.h>

#include <torch/torch.h>

#include <chrono>

namespace arc {

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (!failure_.empty()) console().warn("a checkpoint written in the background failed: {}", failure_);
}

void AsyncCheckpointWriter::save(CheckpointWriter checkpoint, const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  // The worker reads data_ too, but changes only its metadata, which same_data leaves aside.
  if (busy_ && data_->same_data(checkpoint)) {
    files_.push_back({path, checkpoint.meta(), nullptr});
    last_blocked_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  if (busy_ && !said_waiting_) {
    said_waiting_ = true;
    console().warn(
        "checkpoint '{}' waits for the background write of '{}' to end: saves come faster than the disk "
        "takes them, and training waits (save less often; said once)",
        path, current_path_);
  }
  changed_.wait(lock, [this] { return !busy_; });
  // The worker is idle: the buffer and data_ are this thread's until busy_ is set again.
  lock.unlock();
  checkpoint.copy_tensors_to(buffer_);
  lock.lock();
  data_.emplace(std::move(checkpoint));
  files_.push_back({path, data_->meta(), nullptr});
  current_path_ = path;  // until the worker takes the file: it may not have run yet when the next save asks
  busy_ = true;
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  lock.unlock();
  changed_.notify_all();
  last_blocked_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void AsyncCheckpointWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !files_.empty(); });
    if (files_.empty()) return;
    auto job = std::move(files_.front());
    files_.pop_front();
    const bool after_failure = failed_since_idle_;
    if (!job.action) current_path_ = job.path;
    lock.unlock();
    std::string error;
    try {
      if (!job.action) {
        data_->set_meta(std::move(job.meta));
        data_->write(job.path, CheckpointWriter::Threads::kOne);
      } else if (!after_failure) {
        job.action();
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty() && failure_.empty()) failure_ = error;
    failed_since_idle_ = failed_since_idle_ || !error.empty();
    if (files_.empty()) {
      busy_ = false;
      failed_since_idle_ = false;
      changed_.notify_all();
    }
  }
}

void AsyncCheckpointWriter::then(std::function<void()> action) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (busy_) {
      files_.push_back({"", nullptr, std::move(action)});
      return;
    }
    // The last write failed, and its error is not taken yet.
    if (!failure_.empty()) return;
  }
  // Nothing pending: the worker is idle until the next save, which this thread would make.
  action();
}

void AsyncCheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
}

bool AsyncCheckpointWriter::writing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

bool AsyncCheckpointWriter::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !failure_.empty();
}

std::optional<std::string> AsyncCheckpointWriter::take_failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) return std::nullopt;
  return std::exchange(failure_, std::string());
}

void AsyncCheckpointWriter::release() {
  wait();
  std::lock_guard<std::mutex> lock(mutex_);
  data_.reset();
  buffer_ = torch::Tensor();
  said_waiting_ = false;
}

}  // namespace arc
