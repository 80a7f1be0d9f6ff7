// DataLoader: ordering, sharding and prefetching.
#include <arc/data/data_loader.h>

#include <arc/base/console.h>
#include <arc/base/error.h>

#include <torch/cuda.h>

#include <algorithm>

namespace arc {

DataLoader::DataLoader(DataSource source, int64_t rank, int64_t world_size, uint64_t seed)
    : source_(std::move(source)), rank_(rank), world_size_(world_size) {
  ARC_CHECK(source_.dataset != nullptr, "DataLoader got a DataSource without a dataset; set its dataset, e.g. ",
            "DataSource(std::make_shared<TensorDataset>(tensors), DataLoaderOptions(64))");
  const auto& options = source_.options;
  ARC_CHECK(options.batch_size() >= 1, "batch_size must be >= 1, got ", options.batch_size());
  ARC_CHECK(options.num_workers() >= 0, "num_workers must be >= 0, got ", options.num_workers());
  ARC_CHECK(options.prefetch_factor() >= 1, "prefetch_factor must be >= 1, got ", options.prefetch_factor());
  pin_memory_ = options.pin_memory() && torch::cuda::is_available();
  if (options.pin_memory() && !pin_memory_)
    console().warn(
        "pin_memory is on, but no CUDA device is available; batches stay in ordinary memory (set pin_memory "
        "to false where no GPU is used)");
  sampler_ = source_.sampler;
  if (!sampler_) {
    sampler_ = options.shuffle() ? std::shared_ptr<Sampler>(std::make_shared<RandomSampler>(seed))
                                 : std::make_shared<SequentialSampler>();
  }
  set_epoch(0);
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch == epoch_ && !shard_.empty()) return;
  epoch_ = epoch;
  shard_ = shard(sampler_->order(source_.dataset->size(), epoch), rank_, world_size_, source_.options.even_pad());
}

int64_t DataLoader::num_batches() const {
  const auto samples = static_cast<int64_t>(shard_.size());
  const int64_t batch = source_.options.batch_size();
  return source_.options.drop_last() ? samples / batch : (samples + batch - 1) / batch;
}

std::vector<int64_t> DataLoader::indices_of(int64_t batch) const {
  const int64_t size = source_.options.batch_size();
  const auto begin = static_cast<size_t>(batch * size);
  const size_t end = std::min(shard_.size(), begin + static_cast<size_t>(size));
  return std::vector<int64_t>(shard_.begin() + static_cast<std::ptrdiff_t>(begin),
                              shard_.begin() + static_cast<std::ptrdiff_t>(end));
}

void DataLoader::start(int64_t first_batch) {
  stop_workers();
  end_ = num_batches();
  ARC_CHECK(first_batch >= 0 && first_batch <= end_, "cannot start the epoch at batch ", first_batch, "; it has ", end_,
            " batches (resuming with another dataset or batch size than the checkpoint was saved with?)");
  started_ = true;
  position_ = first_batch;
  next_fetch_ = first_batch;
  ready_.clear();
  failed_.clear();
  stopping_ = false;
  for (int64_t i = 0; i < source_.options.num_workers(); ++i) workers_.emplace_back([this] { worker_loop(); });
}

Batch DataLoader::fetch(int64_t batch) const {
  auto fetched = source_.dataset->get_batch(indices_of(batch));
  return pin_memory_ ? fetched.pin_memory() : fetched;
}

void DataLoader::worker_loop() {
  const int64_t capacity = source_.options.num_workers() * source_.options.prefetch_factor();
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    slot_free_.wait(lock, [&] { return stopping_ || next_fetch_ >= end_ || next_fetch_ < position_ + capacity; });
    if (stopping_ || next_fetch_ >= end_) return;
    const int64_t batch = next_fetch_++;
    lock.unlock();
    std::optional<Batch> fetched;
    std::exception_ptr error;
    try {
      fetched = fetch(batch);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      failed_[batch] = error;
    } else {
      ready_.emplace(batch, std::move(*fetched));
    }
    batch_ready_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  ARC_CHECK(started_, "DataLoader::next() was called before start(); call set_epoch(epoch) and start() at the ",
            "beginning of every epoch");
  if (position_ >= end_) return std::nullopt;
  const int64_t batch = position_;
  if (workers_.empty()) {
    ++position_;
    return fetch(batch);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  batch_ready_.wait(lock, [&] { return ready_.count(batch) > 0 || failed_.count(batch) > 0; });
  if (const auto failed = failed_.find(batch); failed != failed_.end()) std::rethrow_exception(failed->second);
  auto node = ready_.extract(batch);
  ++position_;
  slot_free_.notify_all();
  return std::move(node.mapped());
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  slot_free_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

}  // namespace arc
