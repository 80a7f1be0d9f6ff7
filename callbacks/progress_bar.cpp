// ProgressBar.
#include <arc/callbacks/progress_bar.h>

#include <arc/core/trainer.h>

#include <fmt/format.h>
#include <unistd.h>

namespace arc {
namespace {

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  return fmt::format("{:02d}:{:02d}", total / 60, total % 60);
}

}  // namespace

ProgressBar::ProgressBar(int64_t plain_every) : plain_every_(plain_every), terminal_(isatty(STDERR_FILENO) != 0) {}

void ProgressBar::on_train_epoch_start(Trainer&, TrainModule&) {
  epoch_start_ = last_draw_ = std::chrono::steady_clock::now();
}

std::string ProgressBar::line(Trainer& trainer, int64_t done) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  const int64_t total = trainer.num_training_batches();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  std::string text = fmt::format("Epoch {}: {}/{} [{}<{}, {:.2f} it/s]", trainer.current_epoch(), done, total,
                                 format_duration(elapsed), format_duration(eta), rate);
  for (const auto& [name, value] : trainer.progress_bar_metrics()) text += fmt::format(" {}={:.4g}", name, value);
  return text;
}

void ProgressBar::draw(const std::string& text, bool final_line) {
  if (terminal_) {
    const size_t pad = drawn_width_ > text.size() ? drawn_width_ - text.size() : 0;
    std::fprintf(stderr, "\r%s%*s%s", text.c_str(), static_cast<int>(pad), "", final_line ? "\n" : "");
    drawn_width_ = final_line ? 0 : text.size();
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t batch_idx) {
  if (!trainer.is_global_zero()) return;
  const int64_t done = batch_idx + 1;
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
  } else if (done % plain_every_ != 0) {
    return;
  }
  draw(line(trainer, done), false);
}

void ProgressBar::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (trainer.is_global_zero()) draw(line(trainer, trainer.progress().epoch_batches), true);
}

void ProgressBar::on_validation_end(Trainer& trainer, TrainModule&) {
  if (!trainer.is_global_zero() || trainer.sanity_checking() || trainer.stage() != Stage::fit) return;
  std::string text = "Validation:";
  for (const auto& [name, value] : trainer.progress_bar_metrics()) text += fmt::format(" {}={:.4g}", name, value);
  if (terminal_ && drawn_width_ > 0) std::fprintf(stderr, "\n");
  drawn_width_ = 0;
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace arc
