// ModelSummary: a table of the module's layers, parameter counts and size when fit starts.
#pragma once

#include <arc/core/callback.h>

#include <string>

namespace arc {

/// Prints, on rank 0, the module's layers down to `max_depth` levels (1: its children, as
/// Lightning's default; -1: every level; 0: no table) with type and parameters, then the totals.
class ModelSummary : public Callback {
 public:
  /// Prints the layers down to `max_depth` levels.
  explicit ModelSummary(int64_t max_depth = 1);
  std::string state_key() const override { return "ModelSummary"; }
  void on_fit_start(Trainer& trainer, TrainModule& module) override;

  /// The table as text; nested layers by their dotted names ("encoder.0").
  static std::string summarize(const TrainModule& module, int64_t max_depth = 1);

 private:
  int64_t max_depth_;
};

}  // namespace arc
