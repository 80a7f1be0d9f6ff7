// SpikeDetection.
#include <arc/callbacks/spike_detection.h>

#include <arc/base/console.h>
#include <arc/base/output_file.h>
#include <arc/core/trainer.h>
#include <arc/strategies/collectives.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <utility>

namespace arc {

SpikeDetection::SpikeDetection(SpikeDetectionOptions options) : options_(std::move(options)) {
  ARC_CHECK(options_.mode() == "min" || options_.mode() == "max", "SpikeDetection: mode is \"", options_.mode(),
            "\"; use \"min\" (a loss) or \"max\"");
  ARC_CHECK(options_.window() >= 1, "SpikeDetection: window is ", options_.window(),
            "; give the number of batches the running mean covers, 1 or more");
  ARC_CHECK(options_.warmup() >= 0, "SpikeDetection: warmup is ", options_.warmup(), "; give 0 or more batches");
}

std::string SpikeDetection::exclude_batches_path(const Trainer& trainer) const {
  std::filesystem::path path =
      options_.exclude_batches_path().empty() ? trainer.options().default_root_dir() : options_.exclude_batches_path();
  if (path.extension() != ".json") path /= "skip_batches.json";
  return path.string();
}

// Lightning's _is_spike: the running mean of no value is NaN, which no tolerance is met against.
bool SpikeDetection::is_spike(double value) const {
  if (options_.finite_only() && !std::isfinite(value)) return true;
  const double difference = value - last_value_;
  if (options_.mode() == "min" ? difference <= 0 : difference >= 0) return false;  // as good as the last or better
  const double mean = window_.empty()
                          ? std::numeric_limits<double>::quiet_NaN()
                          : std::accumulate(window_.begin(), window_.end(), 0.0) / static_cast<double>(window_.size());
  const double distance = std::abs(value - mean);
  return (!options_.atol() || distance >= std::abs(*options_.atol())) &&
         (!options_.rtol() || distance >= std::abs(*options_.rtol() * mean));
}

void SpikeDetection::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor& loss, Batch&,
                                        int64_t batch_idx) {
  // A batch whose training_step returned no loss is skipped on every rank; the others still vote.
  const bool has_value = loss.defined();
  const double value = has_value ? loss.detach().item<double>() : 0.0;
  bool spike = has_value && batch_idx >= options_.warmup() && is_spike(value);
  bool not_finite = has_value && !std::isfinite(value);
  if (trainer.world_size() > 1) {
    const CollectiveName name("SpikeDetection vote");
    const auto votes = trainer.strategy().all_reduce(
        torch::tensor({spike ? 1.0 : 0.0, not_finite ? 1.0 : 0.0}, torch::kFloat64), Reduce::max);
    spike = votes[0].item<double>() > 0;
    not_finite = votes[1].item<double>() > 0;
  }
  if (spike) handle_spike(trainer, batch_idx);
  // Only finite values count (Lightning's intent; its code also adds one seen during warmup).
  if (!has_value || not_finite) return;
  window_.push_back(value);
  if (static_cast<int64_t>(window_.size()) > options_.window()) window_.pop_front();
  last_value_ = value;
}

void SpikeDetection::handle_spike(Trainer& trainer, int64_t batch_idx) {
  bad_batches_.push_back(batch_idx - 1);
  bad_batches_.push_back(batch_idx);
  const std::string path = exclude_batches_path(trainer);
  if (trainer.is_global_zero()) {
    if (const auto folder = std::filesystem::path(path).parent_path(); !folder.empty()) {
      std::error_code error;
      std::filesystem::create_directories(folder, error);
      ARC_CHECK(!error, "SpikeDetection found a spike in batch ", batch_idx, " of epoch ", trainer.current_epoch(),
                " but cannot make the folder of its exclude_batches_path '", path, "' (", error.message(),
                "); set exclude_batches_path (or default_root_dir) to a folder it can write");
    }
    OutputFile file(path, "SpikeDetection's list of batches to skip", "exclude_batches_path");
    const std::string text = nlohmann::json(bad_batches_).dump(4) + "\n";
    file.write(text.data(), text.size());
    file.commit();
  }
  throw TrainingSpikeException(
      detail::str("Training spike detected in batch ", batch_idx, " of epoch ", trainer.current_epoch(),
                  " (SpikeDetection); the batches to skip when resuming are listed in '", path, "'"));
}

nlohmann::json SpikeDetection::state_dict() const {
  return {{"last_val", last_value_}, {"window", window_}, {"bad_batches", bad_batches_}};
}

void SpikeDetection::load_state_dict(const nlohmann::json& state) {
  last_value_ = state.at("last_val").get<double>();
  window_ = state.at("window").get<std::deque<double>>();
  bad_batches_ = state.at("bad_batches").get<std::vector<int64_t>>();
}

}  // namespace arc
