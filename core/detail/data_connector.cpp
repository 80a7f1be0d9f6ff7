// DataConnector.
#include <arc/core/detail/data_connector.h>

#include <arc/base/error.h>
#include <arc/core/train_module.h>
#include <arc/data/data_loader.h>
#include <arc/strategies/strategy.h>

namespace arc {
namespace {

// What was passed, else the data module's, else the module's own. `what` names the stage's data in
// the error when there must be some.
template <typename Sources>
Sources pick(const Sources& given, DataModule* data, Sources (DataHooks::*hook)(), TrainModule& module,
             const char* what) {
  if (given) return given;
  if (data != nullptr) {
    if (auto sources = (data->*hook)()) return sources;
  }
  if (auto sources = (module.*hook)()) return sources;
  if (what != nullptr)
    ARC_FAIL("no ", what, " data: pass a DataSource or a DataModule, or override ", what,
             "_dataloader() in the module or data module");
  return {};
}

// overfit_batches trains on the first batches as they come: `source` (each of a CombinedLoader's
// sources too) without its shuffle.
DataSource unshuffled(DataSource source) {
  source.options.shuffle(false);
  if (!source.combined) return source;
  auto sources = source.combined->sources();
  for (auto& [name, part] : sources) part = unshuffled(part);
  return CombinedLoader(std::move(sources), source.combined->mode());
}

}  // namespace

DataConnector::DataConnector(const TrainerOptions& options, Strategy& strategy, TrainModule& module, DataModule* data)
    : options_(options), strategy_(strategy), module_(module), data_(data) {}

std::unique_ptr<DataLoader> DataConnector::train(const DataSource& given, std::optional<int64_t> batch_size) const {
  auto source = pick(given, data_, &DataHooks::train_dataloader, module_, "train");
  if (batch_size) {
    ARC_CHECK(source.combined == nullptr, "the fit trains with batch size ", *batch_size, " (BatchSizeFinder's, or ",
              "that of the checkpoint it resumes from) for one training source, but the training data is now a ",
              "CombinedLoader; give the fit the one source it was tuned for");
    source.options.batch_size(*batch_size);
  }
  return loader(source);
}

Loaders DataConnector::val(const DataSources& given, bool required) const {
  return loaders(pick(given, data_, &DataHooks::val_dataloaders, module_, required ? "val" : nullptr), "val");
}

Loaders DataConnector::test(const DataSources& given) const {
  return loaders(pick(given, data_, &DataHooks::test_dataloaders, module_, "test"), "test");
}

Loaders DataConnector::predict(const DataSources& given) const {
  return loaders(pick(given, data_, &DataHooks::predict_dataloaders, module_, "predict"), "predict");
}

std::unique_ptr<DataLoader> DataConnector::loader(const DataSource& source) const {
  const DataSource adjusted = options_.overfit_batches().is_zero() ? source : unshuffled(source);
  // Without the distributed sampler every rank reads the source whole: the user shards it.
  const bool shard = options_.use_distributed_sampler();
  return std::make_unique<DataLoader>(adjusted, shard ? strategy_.global_rank() : 0, shard ? strategy_.world_size() : 1,
                                      options_.seed().value_or(0));
}

Loaders DataConnector::loaders(const DataSources& sources, const char* stage) const {
  Loaders out;
  for (const auto& source : sources) {
    ARC_CHECK(source.combined == nullptr, "the ", stage, " data is a CombinedLoader, which is for training; pass the ",
              stage, " sources as a list instead, e.g. {clean, noisy}: they run one after the other, each with its ",
              "dataloader_idx (Lightning's \"sequential\" mode)");
    out.push_back(loader(source));
  }
  return out;
}

}  // namespace arc
