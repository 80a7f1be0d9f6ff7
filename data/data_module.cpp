// DataSources and CombinedLoader.
#include <arc/data/data_module.h>

#include <arc/base/error.h>

#include <algorithm>
#include <set>

namespace arc {

DataSource::DataSource(CombinedLoader sources) : combined(std::make_shared<const CombinedLoader>(std::move(sources))) {}

CombinedLoader::CombinedLoader(Sources sources, std::string mode)
    : sources_(std::move(sources)), mode_(std::move(mode)) {
  ARC_CHECK(mode_ != "sequential", "CombinedLoader mode \"sequential\" is for evaluation: pass validation, test or ",
            "predict sources as a list, e.g. trainer.validate(module, {clean, noisy}), and they run one after the ",
            "other; for training use \"max_size_cycle\", \"min_size\" or \"max_size\"");
  const std::vector<std::string> modes{"max_size_cycle", "min_size", "max_size"};
  if (std::find(modes.begin(), modes.end(), mode_) == modes.end())
    throw Error(unknown_name_message("CombinedLoader mode", mode_, modes));
  ARC_CHECK(!sources_.empty(), "CombinedLoader got no sources; give it named sources, e.g. ",
            "CombinedLoader({{\"labeled\", labeled}, {\"unlabeled\", unlabeled}})");
  std::set<std::string> names;
  for (const auto& [name, source] : sources_) {
    ARC_CHECK(!name.empty(), "a CombinedLoader source has an empty name; name each source, as its part of the batch");
    ARC_CHECK(names.insert(name).second, "CombinedLoader has two sources named '", name, "'; give each its own name");
    ARC_CHECK(source.combined == nullptr, "CombinedLoader source '", name, "' is a CombinedLoader itself; list its ",
              "sources in the outer one instead");
    ARC_CHECK(source.stream == nullptr, "CombinedLoader source '", name, "' is a stream (IterableDataset), but ",
              "CombinedLoader combines datasets, whose lengths it knows ahead; read the streams together in one ",
              "IterableDataset whose samples hold both, or make the stream a Dataset");
    ARC_CHECK(source.dataset != nullptr, "CombinedLoader source '", name, "' has no dataset; give it one, e.g. ",
              "{std::make_shared<TensorDataset>(tensors), DataLoaderOptions(64)}");
  }
}

DataSources::DataSources(std::vector<DataSource> sources) : sources_(std::move(sources)) {
  for (size_t i = 0; i < sources_.size(); ++i)
    ARC_CHECK(static_cast<bool>(sources_[i]), "data source ", i, " of ", sources_.size(),
              " has no dataset; give each loader of a stage a dataset or a stream, or leave the empty one out");
}

}  // namespace arc
