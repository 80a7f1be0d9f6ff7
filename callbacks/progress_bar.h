// ProgressBar: on a terminal, one line redrawn in place (epoch, batch/total, it/s, ETA and the
// prog_bar metrics); elsewhere, a plain line every N batches. Validation (outside the sanity check),
// test and predict get a line of their own the same way. Rank 0 only.
#pragma once

#include <arc/callbacks/callback.h>

#include <chrono>
#include <cstdio>

namespace arc {

/// Shows training, validation, test and predict progress on standard error.
class ProgressBar : public Callback {
 public:
  /// `plain_every`: batches between lines when standard error is not a terminal.
  explicit ProgressBar(int64_t plain_every = 50);

  std::string state_key() const override { return "ProgressBar"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
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

  int64_t plain_every_;
  bool terminal_;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point eval_start_;
  std::chrono::steady_clock::time_point last_draw_;
  size_t drawn_width_ = 0;
  int64_t eval_done_ = 0;
};

}  // namespace arc
