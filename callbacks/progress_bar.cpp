// ProgressBar.
#include <arc/callbacks/progress_bar.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>
#include <arc/data/data_module.h>
#include <arc/data/dataset.h>

#include <fmt/format.h>
#include <unistd.h>

namespace arc {
namespace {

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  return fmt::format("{:02d}:{:02d}", total / 60, total % 60);
}

// The rate counts the batches run since the bar started (`done - first`: a resumed epoch's earlier
// batches ran in another process); with none yet, the rate and time left are unknown ("?", as tqdm's).
std::string rate_and_times(double elapsed, int64_t first, int64_t done, int64_t total) {
  const bool known = done > first && elapsed > 0;
  const double rate = known ? static_cast<double>(done - first) / elapsed : 0.0;
  const std::string rate_text = known ? fmt::format("{:.2f} it/s", rate) : "? it/s";
  // A stream's batches are not counted ahead: no total and no time left.
  if (total == kUnknownLength) return fmt::format("{}/? [{}, {}]", done, format_duration(elapsed), rate_text);
  const std::string eta = known ? format_duration(static_cast<double>(total - done) / rate) : "?";
  return fmt::format("{}/{} [{}<{}, {}]", done, total, format_duration(elapsed), eta, rate_text);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string with_metrics(std::string text, const Trainer& trainer) {
  for (const auto& [name, value] : trainer.progress_bar_metrics()) text += fmt::format(" {}={:.4g}", name, value);
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::optional<int64_t> refresh_rate, bool leave)
    : refresh_rate_(refresh_rate), leave_(leave), terminal_(isatty(STDERR_FILENO) != 0) {
  ARC_CHECK(!refresh_rate || *refresh_rate >= 0, "ProgressBar: refresh_rate is ", refresh_rate.value_or(0),
            "; give the batches between redraws (1 or more), or 0 for no progress bar");
}

void ProgressBar::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  epoch_start_ = last_draw_ = std::chrono::steady_clock::now();
  epoch_first_ = trainer.progress().epoch_batches;
}

std::string ProgressBar::line(Trainer& trainer, int64_t done) const {
  return with_metrics(
      fmt::format("Epoch {}: {}", trainer.current_epoch(),
                  rate_and_times(seconds_since(epoch_start_), epoch_first_, done, trainer.num_training_batches())),
      trainer);
}

std::string ProgressBar::eval_line(Trainer& trainer, const char* title, int64_t done) const {
  return fmt::format("{}: {}", title, rate_and_times(seconds_since(eval_start_), 0, done, trainer.num_val_batches()));
}

void ProgressBar::draw(const std::string& text, bool final_line) {
  if (refresh_rate_ == 0) return;
  if (terminal_) {
    const size_t pad = drawn_width_ > text.size() ? drawn_width_ - text.size() : 0;
    std::fprintf(stderr, "\r%s%*s%s", text.c_str(), static_cast<int>(pad), "", final_line ? "\n" : "");
    drawn_width_ = final_line ? 0 : text.size();
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::maybe_draw(int64_t done, const std::string& text) {
  if (refresh_rate_ == 0) return;
  const int64_t every = refresh_rate_.value_or(terminal_ ? 1 : 50);
  if (done % every != 0) return;
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
  }
  draw(text, false);
}

void ProgressBar::end_line() {
  if (terminal_ && drawn_width_ > 0) std::fprintf(stderr, "\n");
  drawn_width_ = 0;
}

void ProgressBar::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t batch_idx) {
  if (trainer.is_global_zero()) maybe_draw(batch_idx + 1, line(trainer, batch_idx + 1));
}

void ProgressBar::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  if (trainer.is_global_zero()) draw(line(trainer, trainer.progress().epoch_batches), leave_);
}

void ProgressBar::on_train_end(Trainer& trainer, TrainModule&) {
  if (trainer.is_global_zero()) end_line();
}

// The error goes on a line of its own.
void ProgressBar::on_exception(Trainer& trainer, TrainModule&, const std::exception&) {
  if (trainer.is_global_zero()) end_line();
}

// A validation inside fit draws on the training line of a terminal (and gives it back at its end);
// elsewhere an evaluation starts a line of its own.
void ProgressBar::start_eval(Trainer& trainer) {
  if (!trainer.is_global_zero() || trainer.sanity_checking()) return;
  over_train_line_ = terminal_ && trainer.stage() == Stage::fit;
  if (!over_train_line_) end_line();
  eval_done_ = 0;
  eval_start_ = std::chrono::steady_clock::now();
}

void ProgressBar::eval_batch_done(Trainer& trainer, const char* title) {
  if (!trainer.is_global_zero() || trainer.sanity_checking()) return;
  ++eval_done_;
  maybe_draw(eval_done_, eval_line(trainer, title, eval_done_));
}

void ProgressBar::end_eval(Trainer& trainer, const char* title) {
  if (!trainer.is_global_zero() || trainer.sanity_checking()) return;
  if (over_train_line_) return draw(line(trainer, trainer.progress().epoch_batches), false);
  draw(with_metrics(eval_line(trainer, title, trainer.num_val_batches()), trainer), true);
}

void ProgressBar::on_validation_start(Trainer& trainer, TrainModule&) { start_eval(trainer); }

void ProgressBar::on_validation_batch_end(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  eval_batch_done(trainer, "Validation");
}

void ProgressBar::on_validation_end(Trainer& trainer, TrainModule&) { end_eval(trainer, "Validation"); }

void ProgressBar::on_test_start(Trainer& trainer, TrainModule&) { start_eval(trainer); }

void ProgressBar::on_test_batch_end(Trainer& trainer, TrainModule&, Batch&, int64_t) {
  eval_batch_done(trainer, "Testing");
}

void ProgressBar::on_test_end(Trainer& trainer, TrainModule&) { end_eval(trainer, "Testing"); }

void ProgressBar::on_predict_start(Trainer& trainer, TrainModule&) { start_eval(trainer); }

void ProgressBar::on_predict_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  eval_batch_done(trainer, "Predicting");
}

void ProgressBar::on_predict_end(Trainer& trainer, TrainModule&) { end_eval(trainer, "Predicting"); }

}  // namespace arc
