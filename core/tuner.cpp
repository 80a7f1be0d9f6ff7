// Tuner and LRFinder.
#include <arc/core/tuner.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/checkpoint.h>
#include <arc/core/trainer.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace arc {
namespace {

// Sets each step's rate and records the smoothed loss, as Lightning's _LRCallback.
class LRSweep : public Callback {
 public:
  explicit LRSweep(const LRFinderOptions& options) : options_(options) {}
  std::string state_key() const override { return "LRSweep"; }

  void on_train_batch_start(Trainer& trainer, TrainModule&, Batch&, int64_t) override {
    const double step = static_cast<double>(trainer.global_step());
    const double last = static_cast<double>(std::max<int64_t>(options_.num_training() - 1, 1));
    const double lr = options_.mode() == "linear"
                          ? options_.min_lr() + (options_.max_lr() - options_.min_lr()) * step / last
                          : options_.min_lr() * std::pow(options_.max_lr() / options_.min_lr(), step / last);
    for (const auto& config : trainer.optimizer_configs())
      for (auto& group : config.optimizer->param_groups()) group.options().set_lr(lr);
    current_lr_ = lr;
  }

  // Once per optimizer step: the global step has just advanced.
  void on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor& loss, Batch&, int64_t) override {
    const int64_t step = trainer.global_step();
    if (step == recorded_step_ || !loss.defined()) return;
    recorded_step_ = step;
    average_ = kBeta * average_ + (1 - kBeta) * loss.item<double>();
    const double smoothed = average_ / (1 - std::pow(kBeta, static_cast<double>(lrs_.size() + 1)));
    lrs_.push_back(current_lr_);
    losses_.push_back(smoothed);
    const double threshold = options_.early_stop_threshold();
    if (threshold > 0 && lrs_.size() > 1 && (smoothed > threshold * best_ || !std::isfinite(smoothed)))
      trainer.request_stop("lr_find: the loss diverged");
    if (lrs_.size() == 1 || smoothed < best_) best_ = smoothed;
  }

  LRFinder result() const { return LRFinder(lrs_, losses_); }

 private:
  static constexpr double kBeta = 0.98;
  LRFinderOptions options_;
  double current_lr_ = 0;
  double average_ = 0;
  double best_ = 0;
  int64_t recorded_step_ = 0;
  std::vector<double> lrs_, losses_;
};

// numpy.gradient: central differences inside, one-sided at the ends.
std::vector<double> gradient(const std::vector<double>& y) {
  std::vector<double> out(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    if (i == 0) {
      out[i] = y[1] - y[0];
    } else if (i + 1 == y.size()) {
      out[i] = y[i] - y[i - 1];
    } else {
      out[i] = (y[i + 1] - y[i - 1]) / 2;
    }
  }
  return out;
}

}  // namespace

LRFinder::LRFinder(std::vector<double> lrs, std::vector<double> losses)
    : lrs_(std::move(lrs)), losses_(std::move(losses)) {}

std::optional<double> LRFinder::suggestion(int64_t skip_begin, int64_t skip_end) const {
  std::vector<size_t> kept;
  for (int64_t i = skip_begin; i < static_cast<int64_t>(losses_.size()) - skip_end; ++i)
    if (std::isfinite(losses_[static_cast<size_t>(i)])) kept.push_back(static_cast<size_t>(i));
  if (kept.size() < 2) return std::nullopt;
  std::vector<double> values;
  for (const size_t i : kept) values.push_back(losses_[i]);
  const auto slopes = gradient(values);
  const auto steepest = std::min_element(slopes.begin(), slopes.end()) - slopes.begin();
  return lrs_[kept[static_cast<size_t>(steepest)]];
}

void LRFinder::write_csv(const std::string& path) const {
  std::ofstream out(path);
  ARC_CHECK(out.good(), "lr_find: cannot write '", path, "'; choose a writable path");
  out << "lr,loss\n";
  for (size_t i = 0; i < lrs_.size(); ++i) out << fmt::format("{:.9g},{:.9g}\n", lrs_[i], losses_[i]);
}

void LRFinder::write_svg(const std::string& path) const {
  std::ofstream out(path);
  ARC_CHECK(out.good(), "lr_find: cannot write '", path, "'; choose a writable path");
  std::vector<size_t> finite;
  for (size_t i = 0; i < losses_.size(); ++i)
    if (std::isfinite(losses_[i]) && lrs_[i] > 0) finite.push_back(i);
  const double width = 640, height = 400, margin = 50;
  out << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">\n", width, height);
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!finite.empty()) {
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    for (const size_t i : finite) {
      x_lo = std::min(x_lo, std::log10(lrs_[i]));
      x_hi = std::max(x_hi, std::log10(lrs_[i]));
      y_lo = std::min(y_lo, losses_[i]);
      y_hi = std::max(y_hi, losses_[i]);
    }
    const auto x = [&](double lr) {
      return margin + (width - 2 * margin) * (x_hi > x_lo ? (std::log10(lr) - x_lo) / (x_hi - x_lo) : 0.5);
    };
    const auto y = [&](double loss) {
      return height - margin - (height - 2 * margin) * (y_hi > y_lo ? (loss - y_lo) / (y_hi - y_lo) : 0.5);
    };
    out << "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"";
    for (const size_t i : finite) out << fmt::format("{:.1f},{:.1f} ", x(lrs_[i]), y(losses_[i]));
    out << "\"/>\n";
    if (const auto best = suggestion()) {
      const auto at = std::find(lrs_.begin(), lrs_.end(), *best) - lrs_.begin();
      out << fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"red\"/>\n", x(*best),
                         y(losses_[static_cast<size_t>(at)]));
      out << fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"14\">suggested lr {:.3g}</text>\n", margin, margin / 2,
                         *best);
    }
    out << fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">lr (log scale) {:.3g} .. {:.3g}</text>\n", margin,
                       height - margin / 3, std::pow(10, x_lo), std::pow(10, x_hi));
  }
  out << "</svg>\n";
}

TrainerOptions Tuner::trial_options(int64_t steps) const {
  ARC_CHECK(trainer_.world_size() == 1, "the Tuner runs in one process, and this Trainer has ", trainer_.world_size(),
            " ranks; tune with a single-device Trainer, then train with DDP");
  auto options = trainer_.options();
  options.max_steps(steps)
      .max_epochs(-1)
      .min_epochs(std::nullopt)
      .min_steps(std::nullopt)
      .max_time(std::nullopt)
      .limit_val_batches(BatchAmount::count(0))
      .num_sanity_val_steps(0)
      .enable_checkpointing(false)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .logger(false)
      .profiler("")
      // Its own folder: nothing of the run's (an hpc checkpoint to resume from) is picked up.
      .default_root_dir(trainer_.options().default_root_dir() + "/.tuner");
  return options;
}

namespace {

// A data module's training data, as fit would get it.
DataSource training_data(DataModule& data) {
  data.prepare_data();
  data.setup(Stage::fit);
  auto source = data.train_dataloader();
  ARC_CHECK(source, "the Tuner needs training data, and the data module's train_dataloader() returned none; ",
            "override it");
  return source;
}

// The module's weights (and the trials' folder) as before, however the tuning ends.
class Restore {
 public:
  Restore(TrainModule& module, std::string folder) : folder_(std::move(folder)) {
    for (const auto& [name, tensor] : named_state(module)) saved_.emplace_back(tensor, tensor.detach().clone());
  }
  ~Restore() {
    torch::NoGradGuard no_grad;
    for (auto& [tensor, copy] : saved_) tensor.copy_(copy);
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
  std::string folder_;
};

}  // namespace

LRFinder Tuner::lr_find(TrainModule& module, DataSource train, const LRFinderOptions& options) {
  ARC_CHECK(options.min_lr() > 0 && options.max_lr() > options.min_lr(), "lr_find: min_lr (", options.min_lr(),
            ") must be > 0 and below max_lr (", options.max_lr(), ")");
  ARC_CHECK(options.num_training() >= 2, "lr_find: num_training is ", options.num_training(), "; give 2 or more steps");
  ARC_CHECK(options.mode() == "exponential" || options.mode() == "linear", "lr_find: mode is \"", options.mode(),
            "\"; use \"exponential\" or \"linear\"");
  const auto sweep_options = trial_options(options.num_training());
  auto sweep = std::make_shared<LRSweep>(options);
  {
    const Restore restore(module, sweep_options.default_root_dir());
    Trainer trial(sweep_options, {sweep}, {});
    trial.fit(module, std::move(train));
  }
  auto result = sweep->result();
  if (const auto lr = result.suggestion()) {
    console().info("lr_find: suggested learning rate {:.3g}", *lr);
  } else {
    console().warn("lr_find: too few steps with a finite loss to suggest a learning rate; raise num_training");
  }
  return result;
}

LRFinder Tuner::lr_find(TrainModule& module, DataModule& data, const LRFinderOptions& options) {
  return lr_find(module, training_data(data), options);
}

int64_t Tuner::scale_batch_size(TrainModule& module, DataModule& data, const BatchSizeOptions& options) {
  return scale_batch_size(module, training_data(data), options);
}

int64_t Tuner::scale_batch_size(TrainModule& module, DataSource train, const BatchSizeOptions& options) {
  ARC_CHECK(options.mode() == "power" || options.mode() == "binsearch", "scale_batch_size: mode is \"", options.mode(),
            "\"; use \"power\" or \"binsearch\"");
  ARC_CHECK(options.init_val() >= 1 && options.max_trials() >= 1 && options.steps_per_trial() >= 1,
            "scale_batch_size: init_val, max_trials and steps_per_trial must be >= 1, got ", options.init_val(), ", ",
            options.max_trials(), " and ", options.steps_per_trial());
  ARC_CHECK(static_cast<bool>(train), "scale_batch_size got an empty DataSource; pass the training data, e.g. ",
            "{dataset, DataLoaderOptions(2)} (its batch size is what the trials change)");
  ARC_CHECK(train.combined == nullptr, "scale_batch_size changes one source's batch size, but the training data is a ",
            "CombinedLoader of ", train.combined ? train.combined->sources().size() : 0, " sources; scale each ",
            "source's batch size alone (pass that source), then combine them");
  const auto run_options = trial_options(options.steps_per_trial());
  const Restore restore(module, run_options.default_root_dir());
  // A batch never grows past the dataset (a stream has no such bound).
  const int64_t samples = train.dataset ? train.dataset->size() : kUnknownLength;
  // Whether `size` trains without running out of memory.
  const auto fits = [&](int64_t size) {
    DataSource trial_data = train;
    trial_data.options.batch_size(size);
    try {
      Trainer(run_options, {}, {}).fit(module, trial_data);
      return true;
    } catch (const std::bad_alloc&) {
    } catch (const c10::Error& error) {
      if (std::string(error.what()).find("out of memory") == std::string::npos) throw;
    }
    console().info("scale_batch_size: batch size {} ran out of memory", size);
    return false;
  };
  int64_t low = 0, high = 0, size = std::min(options.init_val(), samples);
  for (int64_t trial = 0; trial < options.max_trials(); ++trial) {
    if (fits(size)) {
      low = size;
      if (size >= samples) break;  // the whole dataset in one batch
      size = high > 0 ? (low + high) / 2 : std::min(size * 2, samples);
    } else {
      ARC_CHECK(size > 1, "scale_batch_size: even a batch of 1 runs out of memory; make the model or its inputs ",
                "smaller, or train on a device with more memory");
      high = size;
      if (options.mode() == "power") break;
      size = (low + high) / 2;
    }
    if (high > 0 && high - low <= 1) break;
  }
  ARC_CHECK(low > 0, "scale_batch_size: no batch size fit; lower init_val (", options.init_val(), ")");
  console().info("scale_batch_size: batch size {} fits", low);
  return low;
}

}  // namespace arc
