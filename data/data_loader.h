// DataLoader: batches a dataset in a sampler's order, shards it by rank, prefetches on worker
// threads and can start an epoch at any batch (for exact mid-epoch resume); or reads a stream
// (an IterableDataset), shards and batches it, and starts it where a state_dict() left it; or
// reads a CombinedLoader's sources side by side, a loader for each.
#pragma once

#include <arc/data/data_module.h>

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace arc {

/// Iterates one rank's batches of a DataSource, epoch by epoch.
class DataLoader {
 public:
  /// `seed` seeds the RandomSampler used when the source shuffles without its own sampler.
  DataLoader(DataSource source, int64_t rank = 0, int64_t world_size = 1, uint64_t seed = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Selects the epoch's order; takes effect at the next `start`.
  void set_epoch(int64_t epoch);
  /// The epoch set_epoch selected (0 before).
  int64_t epoch() const { return epoch_; }
  /// Batches this rank gets per epoch; kUnknownLength for a stream.
  int64_t num_batches() const;
  /// Begins the epoch at batch `first_batch`. A stream begins where `state` (a state_dict() of the
  /// loader) says, else at sample first_batch · batch_size · world size of its epoch.
  void start(int64_t first_batch = 0, const nlohmann::json& state = nullptr);
  /// The next batch of the epoch, or nullopt at its end.
  std::optional<Batch> next();
  /// The epoch's batch count when it is known after reading up to `ahead` batches past the
  /// position: always for a dataset; for a stream once its end is within `ahead` batches.
  std::optional<int64_t> known_end(int64_t ahead);
  /// Batches handed out in this epoch so far (including skipped ones when started mid-epoch).
  int64_t position() const { return position_; }
  /// Whether batches come in page-locked memory (pin_memory asked for, and CUDA present).
  bool pins_memory() const { return pin_memory_; }
  /// The source it reads.
  const DataSource& source() const { return source_; }
  /// The samples of the batch next() returned last: their dataset indices, or for a stream their
  /// positions in the epoch's stream (none for a CombinedLoader's, whose parts each have theirs).
  const std::vector<int64_t>& last_indices() const { return last_indices_; }
  /// Where a stream's epoch is, after the batches handed out: {"position": the samples every rank
  /// took together, "stream": the stream's state() there}, the same on every rank. Null for a
  /// dataset, whose position is the batch index.
  nlohmann::json state_dict() const;

 private:
  class StreamReader;

  void start_parts(int64_t first_batch);
  std::optional<Batch> next_of_parts();
  std::vector<int64_t> indices_of(int64_t batch) const;
  Batch fetch(int64_t batch) const;
  void stop_workers();
  void worker_loop();

  DataSource source_;
  std::unique_ptr<StreamReader> stream_;
  /// A CombinedLoader's sources, a loader each, in its order.
  std::vector<std::unique_ptr<DataLoader>> parts_;
  std::vector<int64_t> last_indices_;
  std::shared_ptr<Sampler> sampler_;
  int64_t rank_;
  int64_t world_size_;
  bool pin_memory_ = false;
  bool started_ = false;
  int64_t epoch_ = 0;
  std::vector<int64_t> shard_;
  int64_t position_ = 0;
  int64_t end_ = 0;

  // Prefetching: workers fetch batches [next_fetch_, position_ + capacity) into ready_.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable batch_ready_;
  std::condition_variable slot_free_;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  int64_t next_fetch_ = 0;
  bool stopping_ = false;
};

}  // namespace arc
