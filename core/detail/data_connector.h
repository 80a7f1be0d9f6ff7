// DataConnector: which data each stage runs on — what the call was given, else the data module's,
// else the module's own — and the loaders over it (Lightning's _DataConnector).
#pragma once

#include <arc/core/detail/evaluation_loop.h>
#include <arc/core/trainer_options.h>
#include <arc/data/data_module.h>

#include <cstdint>
#include <memory>
#include <optional>

namespace arc {

class DataLoader;
class Strategy;
class TrainModule;

class DataConnector {
 public:
  /// `data`: the stage's data module, or null.
  DataConnector(const TrainerOptions& options, Strategy& strategy, TrainModule& module, DataModule* data);

  /// The training loader, of `batch_size` when given instead of the data's own; no training data is
  /// an error that says where to give it.
  std::unique_ptr<DataLoader> train(const DataSource& given, std::optional<int64_t> batch_size = std::nullopt) const;
  /// Validation loaders; none when there is no validation data and `required` is false.
  Loaders val(const DataSources& given, bool required) const;
  Loaders test(const DataSources& given) const;
  Loaders predict(const DataSources& given) const;

 private:
  std::unique_ptr<DataLoader> loader(const DataSource& source) const;
  /// `stage` names the stage's data in errors.
  Loaders loaders(const DataSources& sources, const char* stage) const;

  const TrainerOptions& options_;
  Strategy& strategy_;
  TrainModule& module_;
  DataModule* data_;
};

}  // namespace arc
