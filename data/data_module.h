// DataModule and DataSource: where the Trainer's loaders get their datasets and settings.
#pragma once

#include <arc/base/arg.h>
#include <arc/data/dataset.h>
#include <arc/data/sampler.h>

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace arc {

class CombinedLoader;

/// How a dataset is batched and fetched.
class DataLoaderOptions {
 public:
  /// Options for batches of `batch_size` samples, the others at their defaults.
  explicit DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  /// Samples per batch (the last batch of an epoch may have fewer).
  ARC_ARG(int64_t, batch_size);
  /// Shuffle with a RandomSampler (ignored when the source has its own sampler).
  ARC_ARG(bool, shuffle) = false;
  /// Leave out the last batch of an epoch when it has fewer than batch_size samples.
  ARC_ARG(bool, drop_last) = false;
  /// Threads that fetch batches ahead of the training loop; 0 fetches in the loop itself.
  ARC_ARG(int64_t, num_workers) = 0;
  /// Batches each worker may fetch ahead.
  ARC_ARG(int64_t, prefetch_factor) = 2;
  /// When several ranks read, pad the order so every rank gets as many samples (else drop).
  ARC_ARG(bool, even_pad) = true;
  /// Fetched batches go to page-locked memory, so that their copies to a GPU run asynchronously.
  /// Needs CUDA; without it the loader warns and keeps ordinary memory.
  ARC_ARG(bool, pin_memory) = false;
};

/// A dataset with its loader options and, optionally, a sampler that defines the order; or a
/// stream (an IterableDataset) with its loader options; or several sources read side by side (a
/// CombinedLoader).
struct DataSource {
  /// The dataset read by index (null for a stream or a CombinedLoader).
  std::shared_ptr<Dataset> dataset;
  /// How the loader batches and fetches it.
  DataLoaderOptions options;
  /// The order of the dataset's samples (null: in order, or shuffled by `options.shuffle`).
  std::shared_ptr<Sampler> sampler;
  /// The stream read in order (null for a dataset or a CombinedLoader).
  std::shared_ptr<IterableDataset> stream;
  /// The sources read side by side (null for a dataset or a stream).
  std::shared_ptr<const CombinedLoader> combined;

  /// No data: false as a bool, so that a stage takes its data from elsewhere.
  DataSource() = default;
  /// A dataset, with its loader options and, optionally, the sampler of its order.
  DataSource(std::shared_ptr<Dataset> data, DataLoaderOptions loader_options = DataLoaderOptions(),
             std::shared_ptr<Sampler> order = nullptr)
      : dataset(std::move(data)), options(loader_options), sampler(std::move(order)) {}
  /// A stream, with its loader options.
  DataSource(std::shared_ptr<IterableDataset> samples, DataLoaderOptions loader_options = DataLoaderOptions())
      : options(loader_options), stream(std::move(samples)) {}
  /// Several sources read side by side, for training.
  DataSource(CombinedLoader sources);  // NOLINT(google-explicit-constructor)

  /// Whether the source has data: a dataset, a stream or a CombinedLoader.
  explicit operator bool() const { return dataset != nullptr || stream != nullptr || combined != nullptr; }
};

/// Several training sources read side by side, as Lightning's CombinedLoader: each batch holds a
/// batch of every source as a part named after it (`batch.part("labeled")[0]`). `mode` says where
/// the epoch ends: "max_size_cycle" (the default) with the longest source, the shorter ones starting
/// their order over as often as needed; "min_size" with the shortest; "max_size" with the longest,
/// a source that ran out leaving its part out (`batch.has_part`). Each source keeps its own batch
/// size, shuffle, sampler and workers, and is sharded by rank as one source alone is, so that a
/// resumed run continues at the exact batch. The sources are datasets (a stream's length is not
/// known ahead). For training and arc::Accelerator loops: validation, test and predict take several
/// sources as a list and run them one after the other (Lightning's "sequential").
class CombinedLoader {
 public:
  /// The sources and their names, each the name of its part of the batch.
  using Sources = std::vector<std::pair<std::string, DataSource>>;
  /// Reads `sources` side by side, the epoch ending as `mode` says; an unknown mode, no source, or a
  /// source without a name is an error.
  explicit CombinedLoader(Sources sources, std::string mode = "max_size_cycle");

  /// The sources, in the order given.
  const Sources& sources() const { return sources_; }
  /// Where the epoch ends: "max_size_cycle", "min_size" or "max_size".
  const std::string& mode() const { return mode_; }

 private:
  Sources sources_;
  std::string mode_;
};

/// A stage's data: one DataSource or several (validation, test and predict may have several, as
/// Lightning's dataloader lists; their steps get each one's `dataloader_idx`). Converts from a
/// DataSource, from `{dataset, options}` and from a list `{source_a, source_b}`.
class DataSources {
 public:
  DataSources() = default;
  /// One source; an empty one gives none.
  DataSources(DataSource source) {  // NOLINT(google-explicit-constructor)
    if (source) sources_.push_back(std::move(source));
  }
  /// One dataset, with its loader options and, optionally, its sampler.
  DataSources(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = DataLoaderOptions(),
              std::shared_ptr<Sampler> sampler = nullptr)
      : DataSources(DataSource(std::move(dataset), options, std::move(sampler))) {}
  /// One stream, with its loader options.
  DataSources(std::shared_ptr<IterableDataset> stream, DataLoaderOptions options = DataLoaderOptions())
      : DataSources(DataSource(std::move(stream), options)) {}
  /// Several sources, from a list `{source_a, source_b}`.
  DataSources(std::initializer_list<DataSource> sources) : DataSources(std::vector<DataSource>(sources)) {}
  /// Several sources, in dataloader_idx order; each must have a dataset or a stream.
  DataSources(std::vector<DataSource> sources);  // NOLINT(google-explicit-constructor)

  /// The number of sources.
  size_t size() const { return sources_.size(); }
  /// Whether there is no source.
  bool empty() const { return sources_.empty(); }
  /// Whether there is a source.
  explicit operator bool() const { return !sources_.empty(); }
  /// The source of dataloader_idx `index`.
  const DataSource& operator[](size_t index) const { return sources_[index]; }
  /// The sources, in dataloader_idx order.
  ///@{
  std::vector<DataSource>::const_iterator begin() const { return sources_.begin(); }
  std::vector<DataSource>::const_iterator end() const { return sources_.end(); }
  ///@}

 private:
  std::vector<DataSource> sources_;
};

/// What the Trainer is doing; passed to DataModule::setup and teardown.
enum class Stage { fit, validate, test, predict };
/// The stage's name: "fit", "validate", "test" or "predict".
inline const char* to_string(Stage stage) {
  switch (stage) {
    case Stage::validate:
      return "validate";
    case Stage::test:
      return "test";
    case Stage::predict:
      return "predict";
    case Stage::fit:
      break;
  }
  return "fit";
}

/// The data hooks that DataModule and TrainModule share, as Lightning's DataHooks. The Trainer calls
/// the data module's (when a stage has one) before the module's.
class DataHooks {
 public:
  virtual ~DataHooks() = default;
  /// Downloads or writes what setup reads: called on local rank 0 of each node (the data module's,
  /// then the module's), the other ranks waiting for it, before setup (Lightning's
  /// prepare_data_per_node).
  virtual void prepare_data() {}
  /// When fit, validate, test or predict starts, on every rank after prepare_data: the data
  /// module's, then the callbacks', then the module's (before configure_optimizers and DDP's
  /// set-up). Load or split the datasets, or build what depends on them, here.
  virtual void setup(Stage) {}
  /// The stage's data, asked for after setup (and again every reload_dataloaders_every_n_epochs
  /// epochs of fit). Data passed to the stage takes precedence, then the data module's, then the
  /// module's; an empty source leaves it to the next.
  ///@{
  virtual DataSource train_dataloader() { return {}; }
  virtual DataSource val_dataloader() { return {}; }
  virtual DataSource test_dataloader() { return {}; }
  virtual DataSource predict_dataloader() { return {}; }
  ///@}
  /// Several loaders for a stage, such as `return {clean, noisy};`: override these instead of the
  /// singular ones (which they return by default). Metrics logged in their steps get the suffix
  /// "/dataloader_idx_N" when there are several.
  ///@{
  virtual DataSources val_dataloaders() { return val_dataloader(); }
  virtual DataSources test_dataloaders() { return test_dataloader(); }
  virtual DataSources predict_dataloaders() { return predict_dataloader(); }
  ///@}
  /// At the end of fit, validate, test or predict (not when the stage fails): the module's, then
  /// the data module's.
  virtual void teardown(Stage) {}
};

/// Owns the data of an experiment, as Lightning's LightningDataModule: its hooks are the
/// DataHooks, which a TrainModule has too. Each runs before the module's, and the data module's
/// loaders take precedence over the module's.
class DataModule : public DataHooks {
 public:
  /// What the Trainer's checkpoints keep of the data module (a curriculum's stage, a tokenizer's
  /// vocabulary), as Lightning's state_dict: null, the default, keeps nothing.
  virtual nlohmann::json state_dict() const { return nullptr; }
  /// Gets back what state_dict() gave, when a stage starts from a checkpoint that has it (fit's
  /// resume; validate, test and predict with a ckpt_path), after setup and before the loaders are asked for.
  virtual void load_state_dict(const nlohmann::json&) {}
};

}  // namespace arc
