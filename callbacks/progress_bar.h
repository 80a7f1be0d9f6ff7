// ProgressBar: on a terminal, one line redrawn in place (epoch, batch/total, it/s, ETA and the
// prog_bar metrics); elsewhere, a plain line every N batches. Validation (outside the sanity check),
// test and predict get a line of their own the same way, except that on a terminal a validation
// inside fit draws over the training line. Rank 0 only.
#pragma once

#include <arc/core/callback.h>

#include <chrono>
#include <cstdio>
#include <optional>

namespace arc {

/// Shows training, validation, test and predict progress on standard error.
class ProgressBar : public Callback {
 public:
  /// `refresh_rate` (Lightning's): batches between redraws, 0 for no bar at all; unset, a terminal
  /// redraws after every batch and other output gets a line every 50. A terminal is redrawn at most
  /// every 0.1 s either way (tqdm's default). `leave` (Lightning's, on a terminal): each epoch keeps
  /// its line; off, the fit has one line, redrawn for every epoch and ended when training ends.
  /// Inside fit, validation draws on the training line and gives it back when it ends.
  explicit ProgressBar(std::optional<int64_t> refresh_rate = std::nullopt, bool leave = true);

  std::string state_key() const override { return "ProgressBar"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_train_end(Trainer& trainer, TrainModule& module) override;
  void on_exception(Trainer& trainer, TrainModule& module, const std::exception& error) override;
  void on_validation_start(Trainer& trainer, TrainModule& module) override;
  void on_validation_batch_end(Trainer& trainer, TrainModule& module, Batch& batch, int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;
  void on_test_start(Trainer& trainer, TrainModule& module) override;
  void on_test_batch_end(Trainer& trainer, TrainModule& module, Batch& batch, int64_t batch_idx) override;
  void on_test_end(Trainer& trainer, TrainModule& module) override;
  void on_predict_start(Trainer& trainer, TrainModule& module) override;
  void on_predict_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& outputs, Batch& batch,
                            int64_t batch_idx) override;
  void on_predict_end(Trainer& trainer, TrainModule& module) override;

 private:
  std::string line(Trainer& trainer, int64_t done) const;
  /// "<title> done/total [elapsed<eta, rate]" for an evaluation.
  std::string eval_line(Trainer& trainer, const char* title, int64_t done) const;
  void start_eval(Trainer& trainer);
  /// Counts an evaluation batch (of any of the stage's loaders) and draws its line.
  void eval_batch_done(Trainer& trainer, const char* title);
  /// Draws `text` unless the last draw was too recent (terminal) or `done` is off the plain interval.
  void maybe_draw(int64_t done, const std::string& text);
  void draw(const std::string& text, bool final_line);
  /// Ends an evaluation's line with `title` and the prog_bar metrics.
  void end_eval(Trainer& trainer, const char* title);
  /// Ends the line drawn on a terminal, if one is open.
  void end_line();

  std::optional<int64_t> refresh_rate_;
  bool leave_;
  bool terminal_;
  /// Whether the evaluation under way draws over the training line, to give back when it ends.
  bool over_train_line_ = false;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point eval_start_;
  std::chrono::steady_clock::time_point last_draw_;
  size_t drawn_width_ = 0;
  /// The epoch's batch this process started at (after resuming, the checkpoint's).
  int64_t epoch_first_ = 0;
  int64_t eval_done_ = 0;
};

}  // namespace arc
