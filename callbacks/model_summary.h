// ModelSummary: a table of the module's layers, parameter counts and size when fit starts.
#pragma once

#include <arc/callbacks/callback.h>

#include <string>

namespace arc {

/// Prints, on rank 0, each child module with its type and parameters, then the totals.
class ModelSummary : public Callback {
 public:
  std::string state_key() const override { return "ModelSummary"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;

  /// The table as text.
  static std::string summarize(const TrainModule& module);
};

}  // namespace arc
