// BatchSizeFinder.
#include <arc/callbacks/batch_size_finder.h>

#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/trainer.h>

#include <utility>

namespace arc {

BatchSizeFinder::BatchSizeFinder(BatchSizeOptions options, std::string batch_arg_name)
    : options_(std::move(options)), batch_arg_name_(std::move(batch_arg_name)) {
  options_.mode(lowercase(options_.mode()));  // as Lightning's
  check_batch_size_options(options_);
}

void BatchSizeFinder::on_fit_start(Trainer& trainer, TrainModule& module) {
  if (trainer.options().fast_dev_run()) {
    console().warn("BatchSizeFinder: skipped, since fast_dev_run is on");
    return;
  }
  if (trainer.global_step() > 0 || trainer.current_epoch() > 0) {
    console().info("BatchSizeFinder: the resumed fit keeps the checkpoint's batch size (no new search)");
    return;
  }
  scale_batch_size(trainer, module);
}

void BatchSizeFinder::scale_batch_size(Trainer& trainer, TrainModule& module) {
  optimal_batch_size_ = Tuner(trainer).scale_batch_size_in_fit(module, options_, batch_arg_name_);
}

nlohmann::json BatchSizeFinder::state_dict() const {
  return optimal_batch_size_ ? nlohmann::json{{"optimal_batch_size", *optimal_batch_size_}} : nlohmann::json();
}

void BatchSizeFinder::load_state_dict(const nlohmann::json& state) {
  optimal_batch_size_ = state.at("optimal_batch_size").get<int64_t>();
}

}  // namespace arc
