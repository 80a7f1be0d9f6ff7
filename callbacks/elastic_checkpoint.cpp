// ElasticCheckpoint.
#include <arc/callbacks/elastic_checkpoint.h>

#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <filesystem>

namespace arc {

ElasticCheckpoint::ElasticCheckpoint(int64_t every_n_steps, double every_seconds)
    : every_n_steps_(every_n_steps), every_seconds_(every_seconds) {
  ARC_CHECK(every_n_steps >= 0 && every_seconds >= 0, "ElasticCheckpoint: every_n_steps is ", every_n_steps,
            " and every_seconds ", every_seconds, "; give 0 (off) or more for each");
}

std::string ElasticCheckpoint::path(const Trainer& trainer) {
  return trainer.options().default_root_dir() + "/elastic_last.ckpt";
}

std::vector<std::string> ElasticCheckpoint::checkpoint_files(const std::string& kind, const Trainer& trainer) const {
  if (kind != "resume" || !std::filesystem::exists(path(trainer))) return {};
  return {path(trainer)};
}

void ElasticCheckpoint::on_fit_start(Trainer& trainer, TrainModule&) {
  last_saved_step_ = trainer.global_step();
  last_save_time_ = std::chrono::steady_clock::now();
}

void ElasticCheckpoint::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  const int64_t step = trainer.global_step();
  if (step == last_saved_step_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool by_steps = every_n_steps_ > 0 && step % every_n_steps_ == 0;
  const bool by_time =
      every_seconds_ > 0 && std::chrono::duration<double>(now - last_save_time_).count() >= every_seconds_;
  if (!by_steps && !by_time) return;
  trainer.save_checkpoint(path(trainer));
  last_saved_step_ = step;
  last_save_time_ = now;
}

}  // namespace arc
