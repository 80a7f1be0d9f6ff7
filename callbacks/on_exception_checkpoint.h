// OnExceptionCheckpoint: saves a checkpoint when fit fails, so the work is not lost.
#pragma once

#include <arc/core/callback.h>

#include <string>

namespace arc {

/// Writes `<dirpath>/<filename>.ckpt` when an exception leaves fit once training has started. A fit
/// that fails before (resuming from a checkpoint of another model, say) writes nothing: it has
/// nothing to keep, and the file it would write may be the one it was resuming from.
class OnExceptionCheckpoint : public Callback {
 public:
  /// An empty `dirpath` is the current folder, as Lightning joins the paths.
  explicit OnExceptionCheckpoint(std::string dirpath, std::string filename = "on_exception");
  std::string state_key() const override { return "OnExceptionCheckpoint"; }
  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_train_start(Trainer& trainer, TrainModule& module) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;
  std::string exception_checkpoint() const override { return saved_; }
  /// The file it writes: `<dirpath>/<filename>.ckpt`.
  std::string path() const;

 private:
  std::string saved_;
  bool training_started_ = false;
  std::string dirpath_;
  std::string filename_;
};

}  // namespace arc
