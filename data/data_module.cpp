// DataSources.
#include <arc/data/data_module.h>

#include <arc/base/error.h>

namespace arc {

DataSources::DataSources(std::vector<DataSource> sources) : sources_(std::move(sources)) {
  for (size_t i = 0; i < sources_.size(); ++i)
    ARC_CHECK(static_cast<bool>(sources_[i]), "data source ", i, " of ", sources_.size(),
              " has no dataset; give each loader of a stage a dataset or a stream, or leave the empty one out");
}

}  // namespace arc
