// DataLoader: ordering, sharding and prefetching.
#include <arc/data/data_loader.h>

#include <arc/base/console.h>
#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>

#include <torch/cuda.h>

#include <algorithm>
#include <deque>

namespace arc {

// Reads one rank's share of a stream into batches: sample r, r + W, r + 2W, ... for rank r of W.
// Between samples each rank's stream stands at the start of a round of W samples, so that its
// state() is the same on every rank and a resume with another world size starts right. With
// num_workers > 0 one thread reads ahead (a stream is read in order), else the loop reads.
class DataLoader::StreamReader {
 public:
  StreamReader(const IterableDataset& dataset, const DataLoaderOptions& options, int64_t rank, int64_t world,
               bool pin_memory)
      : dataset_(dataset), options_(options), rank_(rank), world_(world), pin_memory_(pin_memory) {}
  ~StreamReader() { stop(); }
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  void start(int64_t epoch, int64_t first_batch, const nlohmann::json& state) {
    stop();
    ready_.clear();
    ended_ = false;
    failed_ = nullptr;
    capacity_ = static_cast<size_t>(std::max<int64_t>(1, options_.num_workers() * options_.prefetch_factor()));
    stream_ = dataset_.open(epoch);
    ARC_CHECK(stream_ != nullptr, "the IterableDataset's open(", epoch, ") returned no stream; return one, e.g. ",
              "std::make_unique<MyStream>(...)");
    if (state.is_null()) {
      round_ = first_batch * options_.batch_size() * world_;
      skip(round_);
    } else {
      round_ = detail::json_integer(state.at("position"), "a loader's position");
      if (state.at("stream").is_null())
        skip(round_);
      else
        stream_->load_state(state.at("stream"));
    }
    taken_ = {{"position", round_}, {"stream", stream_->state()}};
    if (options_.num_workers() > 0) {
      stopping_ = false;
      producer_ = std::thread([this] { produce(); });
    }
  }

  std::optional<Batch> next(std::vector<int64_t>& indices) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!producer_.joinable() && ready_.empty() && !ended_ && !failed_) read_one(lock);
    changed_.wait(lock, [&] { return !ready_.empty() || ended_ || failed_; });
    if (ready_.empty()) {
      if (failed_) std::rethrow_exception(failed_);
      return std::nullopt;
    }
    Entry entry = std::move(ready_.front());
    ready_.pop_front();
    changed_.notify_all();
    indices = std::move(entry.indices);
    taken_ = std::move(entry.state);
    return std::move(entry.batch);
  }

  // The batches still to come when the stream ends within `ahead` of them.
  std::optional<int64_t> remaining(int64_t ahead) {
    const auto wanted = static_cast<size_t>(ahead);
    std::unique_lock<std::mutex> lock(mutex_);
    if (producer_.joinable()) {
      capacity_ = std::max(capacity_, wanted);
      changed_.notify_all();
    } else {
      while (ready_.size() < wanted && !ended_ && !failed_) read_one(lock);
    }
    changed_.wait(lock, [&] { return ready_.size() >= wanted || ended_ || failed_; });
    if (!ended_) return std::nullopt;
    return static_cast<int64_t>(ready_.size());
  }

  nlohmann::json state() const { return taken_; }

 private:
  struct Entry {
    Batch batch;
    std::vector<int64_t> indices;
    nlohmann::json state;
  };

  void skip(int64_t count) {
    if (count > 0) stream_->skip(count);
  }

  // One batch from the stream (unlocked, on one thread at a time), or nullopt at its end.
  std::optional<Entry> read() {
    std::vector<Batch> samples;
    Entry entry;
    while (static_cast<int64_t>(samples.size()) < options_.batch_size()) {
      skip(rank_);
      auto sample = stream_->next();
      if (!sample) break;
      skip(world_ - 1 - rank_);
      samples.push_back(std::move(*sample));
      entry.indices.push_back(round_ + rank_);
      round_ += world_;
    }
    const auto count = static_cast<int64_t>(samples.size());
    if (count == 0 || (count < options_.batch_size() && options_.drop_last())) return std::nullopt;
    entry.batch = collate(samples);
    if (pin_memory_) entry.batch = entry.batch.pin_memory();
    entry.state = {{"position", round_}, {"stream", stream_->state()}};
    return entry;
  }

  // Reads one batch into ready_ (or marks the end), releasing `lock` while it reads.
  void read_one(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    std::optional<Entry> entry;
    std::exception_ptr error;
    try {
      entry = read();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error)
      failed_ = error;
    else if (entry)
      ready_.push_back(std::move(*entry));
    else
      ended_ = true;
    changed_.notify_all();
  }

  void produce() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stopping_ || ready_.size() < capacity_; });
      if (stopping_ || ended_ || failed_) return;
      read_one(lock);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (producer_.joinable()) producer_.join();
  }

  const IterableDataset& dataset_;
  const DataLoaderOptions options_;
  const int64_t rank_;
  const int64_t world_;
  const bool pin_memory_;
  std::unique_ptr<SampleStream> stream_;
  /// The stream position of the next round of samples (the producer's).
  int64_t round_ = 0;
  /// state_dict() after the batches handed out.
  nlohmann::json taken_;

  std::thread producer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> ready_;
  size_t capacity_ = 1;
  bool ended_ = false;
  bool stopping_ = false;
  std::exception_ptr failed_;
};

DataLoader::DataLoader(DataSource source, int64_t rank, int64_t world_size, uint64_t seed)
    : source_(std::move(source)), rank_(rank), world_size_(world_size) {
  std::vector<std::string> set;
  if (source_.dataset) set.push_back("a dataset");
  if (source_.stream) set.push_back("a stream");
  if (source_.combined) set.push_back("a CombinedLoader");
  ARC_CHECK(!set.empty(), "DataLoader got a DataSource without a dataset; set its dataset, e.g. ",
            "DataSource(std::make_shared<TensorDataset>(tensors), DataLoaderOptions(64))");
  ARC_CHECK(set.size() == 1, "a DataSource has ", join(set, " and "),
            " set, but a source reads one of them; give only one");
  ARC_CHECK(world_size_ >= 1 && rank_ >= 0 && rank_ < world_size_, "cannot load data for rank ", rank_,
            " of world size ", world_size_, "; ranks run from 0 to world size - 1, so check RANK and WORLD_SIZE");
  if (source_.combined) {
    // Each source its own shuffle: seeded apart, so that two sources of one size are not shuffled alike.
    uint64_t part_seed = seed;
    for (const auto& [name, part] : source_.combined->sources())
      parts_.push_back(std::make_unique<DataLoader>(part, rank_, world_size_, part_seed++));
    return;
  }
  const auto& options = source_.options;
  ARC_CHECK(options.batch_size() >= 1, "batch_size must be >= 1, got ", options.batch_size());
  ARC_CHECK(options.num_workers() >= 0, "num_workers must be >= 0, got ", options.num_workers());
  ARC_CHECK(options.prefetch_factor() >= 1, "prefetch_factor must be >= 1, got ", options.prefetch_factor());
  pin_memory_ = options.pin_memory() && torch::cuda::is_available();
  if (options.pin_memory() && !pin_memory_)
    console().warn(
        "pin_memory is on, but no CUDA device is available; batches stay in ordinary memory (set pin_memory "
        "to false where no GPU is used)");
  if (source_.stream) {
    ARC_CHECK(!options.shuffle() && source_.sampler == nullptr,
              "a stream (IterableDataset) is read in its own order: shuffle and a sampler do not apply; shuffle in ",
              "the dataset's open(epoch), seeded with the epoch, and set DataLoaderOptions::shuffle(false)");
    stream_ = std::make_unique<StreamReader>(*source_.stream, options, rank_, world_size_, pin_memory_);
    return;
  }
  sampler_ = source_.sampler;
  if (!sampler_) {
    sampler_ = options.shuffle() ? std::shared_ptr<Sampler>(std::make_shared<RandomSampler>(seed))
                                 : std::make_shared<SequentialSampler>();
  }
  set_epoch(0);
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::set_epoch(int64_t epoch) {
  if (!parts_.empty()) {
    for (auto& part : parts_) part->set_epoch(epoch);
    epoch_ = epoch;
    return;
  }
  if (epoch == epoch_ && (!shard_.empty() || stream_)) return;
  epoch_ = epoch;
  if (stream_) return;
  shard_ = shard(sampler_->order(source_.dataset->size(), epoch), rank_, world_size_, source_.options.even_pad());
}

int64_t DataLoader::num_batches() const {
  if (stream_) return kUnknownLength;
  if (!parts_.empty()) {
    // The shortest source's count under "min_size", else the longest's.
    const bool shortest = source_.combined->mode() == "min_size";
    int64_t count = parts_.front()->num_batches();
    for (const auto& part : parts_)
      count = shortest ? std::min(count, part->num_batches()) : std::max(count, part->num_batches());
    return count;
  }
  const auto samples = static_cast<int64_t>(shard_.size());
  const int64_t batch = source_.options.batch_size();
  return source_.options.drop_last() ? samples / batch : (samples + batch - 1) / batch;
}

std::optional<int64_t> DataLoader::known_end(int64_t ahead) {
  if (!stream_) return num_batches();
  const auto remaining = stream_->remaining(ahead);
  if (!remaining) return std::nullopt;
  return position_ + *remaining;
}

nlohmann::json DataLoader::state_dict() const { return stream_ ? stream_->state() : nlohmann::json(nullptr); }

std::vector<int64_t> DataLoader::indices_of(int64_t batch) const {
  const int64_t size = source_.options.batch_size();
  const auto begin = static_cast<size_t>(batch * size);
  const size_t end = std::min(shard_.size(), begin + static_cast<size_t>(size));
  return std::vector<int64_t>(shard_.begin() + static_cast<std::ptrdiff_t>(begin),
                              shard_.begin() + static_cast<std::ptrdiff_t>(end));
}

void DataLoader::start(int64_t first_batch, const nlohmann::json& state) {
  last_indices_.clear();
  position_ = first_batch;
  if (!parts_.empty()) {
    start_parts(first_batch);
    return;
  }
  if (stream_) {
    ARC_CHECK(first_batch >= 0, "cannot start the epoch at batch ", first_batch);
    stream_->start(epoch_, first_batch, state);
    started_ = true;
    return;
  }
  stop_workers();
  end_ = num_batches();
  ARC_CHECK(first_batch >= 0 && first_batch <= end_, "cannot start the epoch at batch ", first_batch, "; it has ", end_,
            " batches (resuming with another dataset or batch size than the checkpoint was saved with?)");
  started_ = true;
  next_fetch_ = first_batch;
  ready_.clear();
  failed_.clear();
  stopping_ = false;
  for (int64_t i = 0; i < source_.options.num_workers(); ++i) workers_.emplace_back([this] { worker_loop(); });
}

// Each source at the batch that the combined batch `first_batch` takes from it: under
// "max_size_cycle" a shorter source is in its (first_batch / its count)-th round.
void DataLoader::start_parts(int64_t first_batch) {
  end_ = num_batches();
  ARC_CHECK(first_batch >= 0 && first_batch <= end_, "cannot start the epoch at batch ", first_batch, "; it has ", end_,
            " batches (resuming with other datasets or batch sizes than the checkpoint was saved with?)");
  const bool cycle = source_.combined->mode() == "max_size_cycle";
  for (size_t i = 0; i < parts_.size(); ++i) {
    const int64_t count = parts_[i]->num_batches();
    ARC_CHECK(!cycle || count > 0 || end_ == 0, "CombinedLoader source '", source_.combined->sources()[i].first,
              "' has no batch for rank ", rank_, ", so mode \"max_size_cycle\" cannot start it over; give it data, or ",
              "use mode \"max_size\" (its part is left out) or \"min_size\"");
    parts_[i]->start(cycle && count > 0 ? first_batch % count : std::min(first_batch, count));
  }
  started_ = true;
}

std::optional<Batch> DataLoader::next_of_parts() {
  if (position_ >= end_) return std::nullopt;
  const bool cycle = source_.combined->mode() == "max_size_cycle";
  Batch combined;
  for (size_t i = 0; i < parts_.size(); ++i) {
    auto batch = parts_[i]->next();
    if (!batch && cycle) {
      parts_[i]->start();
      batch = parts_[i]->next();
    }
    if (batch) combined.set_part(source_.combined->sources()[i].first, std::move(*batch));
  }
  ++position_;
  return combined;
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
  if (!parts_.empty()) return next_of_parts();
  if (stream_) {
    auto fetched = stream_->next(last_indices_);
    if (fetched) ++position_;
    return fetched;
  }
  if (position_ >= end_) return std::nullopt;
  const int64_t batch = position_;
  last_indices_ = indices_of(batch);
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
