// ProgressBar: on a terminal, one line redrawn in place (epoch, batch/total, it/s, ETA and the
// prog_bar metrics); elsewhere, a plain line every N batches. Rank 0 only.
#pragma once

#include <arc/callbacks/callback.h>

#include <chrono>
#include <cstdio>

namespace arc {

/// Shows training and validation progress on standard error.
class ProgressBar : public Callback {
 public:
  /// `plain_every`: batches between lines when standard error is not a terminal.
  explicit ProgressBar(int64_t plain_every = 50);

  std::string state_key() const override { return "ProgressBar"; }
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void on_train_batch_end(Trainer& trainer, TrainModule& module, const torch::Tensor& loss, Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, TrainModule& module) override;
  void on_validation_end(Trainer& trainer, TrainModule& module) override;

 private:
  std::string line(Trainer& trainer, int64_t done) const;
  void draw(const std::string& text, bool final_line);

  int64_t plain_every_;
  bool terminal_;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
  size_t drawn_width_ = 0;
};

}  // namespace arc
