// OnExceptionCheckpoint.
#include <arc/callbacks/on_exception_checkpoint.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <filesystem>

namespace arc {

OnExceptionCheckpoint::OnExceptionCheckpoint(std::string dirpath, std::string filename)
    : dirpath_(std::move(dirpath)), filename_(std::move(filename)) {
  ARC_CHECK(!filename_.empty(), "OnExceptionCheckpoint: filename is empty; give the file's name without .ckpt, ",
            "e.g. on_exception");
}

std::string OnExceptionCheckpoint::path() const {
  return (std::filesystem::path(dirpath_) / (filename_ + ".ckpt")).string();
}

void OnExceptionCheckpoint::setup(Trainer&, TrainModule&, Stage) {
  saved_.clear();
  training_started_ = false;
}

// After the checkpoint fit resumes from (if any) is restored, and after the sanity check.
void OnExceptionCheckpoint::on_train_start(Trainer&, TrainModule&) { training_started_ = true; }

void OnExceptionCheckpoint::on_exception(Trainer& trainer, TrainModule&, const std::exception& error) {
  if (trainer.stage() != Stage::fit || !training_started_ || trainer.optimizer_configs().empty()) return;
  try {
    trainer.save_checkpoint(path(), false, false);
    saved_ = path();
    // An interrupted fit names the file in its own last line.
    if (trainer.is_global_zero() && dynamic_cast<const Interrupted*>(&error) == nullptr)
      console().warn("fit failed ({}); saved '{}' to resume from", error.what(), path());
  } catch (const std::exception& failure) {
    console().error("fit failed ({}) and the exception checkpoint could not be written: {}", error.what(),
                    failure.what());
  }
}

}  // namespace arc
