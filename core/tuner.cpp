// Tuner and LRFinder.
#include <arc/core/tuner.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/detail/checkpoint_connector.h>
#include <arc/core/trainer.h>
#include <arc/data/data_loader.h>
#include <arc/fabric/checkpoint.h>
#include <arc/strategies/strategy.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

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

void Tuner::require_one_process() const {
  ARC_CHECK(trainer_.world_size() == 1, "the Tuner runs in one process, and this Trainer has ", trainer_.world_size(),
            " ranks; tune with a single-device Trainer, then train with DDP (or add a LearningRateFinder callback ",
            "to the DDP fit: it tests the rate on every rank)");
}

TrainerOptions Tuner::trial_options(int64_t steps) const {
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
    // Under FULL_SHARD a parameter of another rank has no memory here; its owner restores it.
    for (const auto& [name, tensor] : named_state(module))
      if (tensor.numel() == 0 || tensor.storage().nbytes() > 0) saved_.emplace_back(tensor, tensor.detach().clone());
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

void check_lr_finder_options(const LRFinderOptions& options) {
  ARC_CHECK(options.min_lr() > 0 && options.max_lr() > options.min_lr(), "lr_find: min_lr (", options.min_lr(),
            ") must be > 0 and below max_lr (", options.max_lr(), ")");
  ARC_CHECK(options.num_training() >= 2, "lr_find: num_training (LearningRateFinder's num_training_steps) is ",
            options.num_training(), "; give 2 or more steps");
  ARC_CHECK(options.mode() == "exponential" || options.mode() == "linear", "lr_find: mode is \"", options.mode(),
            "\"; use \"exponential\" or \"linear\"");
}

namespace {

// The curve, and the rate it suggests said on rank 0.
LRFinder reported(LRFinder result, bool speaks) {
  if (!speaks) return result;
  if (const auto lr = result.suggestion()) {
    console().info("lr_find: suggested learning rate {:.3g}", *lr);
  } else {
    console().warn("lr_find: too few steps with a finite loss to suggest a learning rate; raise num_training");
  }
  return result;
}

// What a sweep inside fit changes besides the weights, as it was however the sweep ends: the CPU
// random state (Lightning's isolate_rng), the loss scale, the profiler the strategy reports to, and
// no gradient left behind.
class RestoreRun {
 public:
  RestoreRun(TrainModule& module, Precision& precision, Strategy& strategy, Profiler* profiler)
      : module_(module),
        precision_(precision),
        strategy_(strategy),
        profiler_(profiler),
        rng_(cpu_rng_state()),
        scale_(precision.state_dict()) {
    strategy_.set_profiler(nullptr);
  }
  ~RestoreRun() {
    strategy_.set_profiler(profiler_);
    set_cpu_rng_state(rng_);
    precision_.load_state_dict(scale_);
    for (auto& parameter : module_.parameters()) parameter.mutable_grad() = torch::Tensor();
  }
  RestoreRun(const RestoreRun&) = delete;
  RestoreRun& operator=(const RestoreRun&) = delete;

 private:
  TrainModule& module_;
  Precision& precision_;
  Strategy& strategy_;
  Profiler* profiler_;
  torch::Tensor rng_;
  nlohmann::json scale_;
};

// The hyper-parameter that holds the module's learning rate: `wanted`, or "lr" or "learning_rate"
// when `wanted` is empty (Lightning's names); nullopt when the module has none of them.
std::optional<std::string> rate_hparam(const TrainModule& module, const std::string& wanted) {
  const auto& hparams = module.hparams();
  for (const auto& key :
       wanted.empty() ? std::vector<std::string>{"lr", "learning_rate"} : std::vector<std::string>{wanted})
    if (hparams.is_object() && hparams.contains(key)) return key;
  return std::nullopt;
}

// What a tuner found, written where configure_optimizers() and the data hooks read it (and
// hparams.yaml records it).
void set_hparam(TrainModule& module, const std::string& key, const nlohmann::json& value) {
  auto hparams = module.hparams();
  hparams[key] = value;
  module.save_hyperparameters(std::move(hparams));
}

// The first parameter group's rate of each optimizer.
std::vector<double> first_rates(const std::vector<OptimizerConfig>& configs) {
  std::vector<double> out;
  for (const auto& config : configs) {
    const auto& groups = config.optimizer->param_groups();
    out.push_back(groups.empty() ? 0.0 : groups.front().options().get_lr());
  }
  return out;
}

}  // namespace

LRFinder Tuner::lr_find(TrainModule& module, DataSource train, const LRFinderOptions& options) {
  require_one_process();
  check_lr_finder_options(options);
  const auto sweep_options = trial_options(options.num_training());
  auto sweep = std::make_shared<LRSweep>(options);
  {
    const Restore restore(module, sweep_options.default_root_dir());
    Trainer trial(sweep_options, {sweep}, {});
    trial.fit(module, std::move(train));
  }
  return reported(sweep->result(), true);
}

void Tuner::require_fit_start(const char* what) const {
  ARC_CHECK(trainer_.stage() == Stage::fit && trainer_.train_dataloader() != nullptr, what,
            " runs inside a running fit, and this Trainer runs none; call it from a callback's on_fit_start");
  ARC_CHECK(trainer_.global_step() == 0 && trainer_.current_epoch() == 0, what,
            " runs before the fit's first step, and this fit is at epoch ", trainer_.current_epoch(), ", step ",
            trainer_.global_step(), "; run it from on_fit_start");
}

void Tuner::run_in_fit(TrainModule& module, TrainerOptions options, std::shared_ptr<Callback> callback,
                       const DataSource& train) {
  const Restore weights(module, options.default_root_dir());
  const RestoreRun run(module, trainer_.precision(), trainer_.strategy(), trainer_.profiler());
  trainer_.run_trial_fit(module, std::move(options), std::move(callback), train);
}

LRFinder Tuner::lr_find_in_fit(TrainModule& module, const LRFinderOptions& options,
                               std::optional<std::string> rate_key) {
  check_lr_finder_options(options);
  require_fit_start(
      "the learning-rate test inside fit (LearningRateFinder runs it at on_fit_start; Tuner::lr_find "
      "runs it before fit)");
  Trainer& t = trainer_;
  const bool from_config = !module.optimizer_config().is_null();
  std::optional<std::string> hparam;
  if (rate_key) {
    hparam = rate_hparam(module, *rate_key);
    ARC_CHECK(hparam || (from_config && rate_key->empty()), "LearningRateFinder sets the rate it finds where ",
              module.name(), "'s configure_optimizers() reads it, but its hyper-parameters have no ",
              rate_key->empty() ? std::string("\"lr\" or \"learning_rate\"") : "\"" + *rate_key + "\"",
              from_config ? "" : " and the config names no optimizer",
              "; save the rate with save_hyperparameters({{\"lr\", 0.1}}) and build the optimizer with ",
              "hparams()[\"lr\"], name the hyper-parameter in attr_name, or set update_attr to false");
  }
  auto sweep = std::make_shared<LRSweep>(options);
  run_in_fit(module, trial_options(options.num_training()), sweep, t.train_dataloader()->source());
  // Rank 0's curve on every rank (each rank's losses are of its own share), as Lightning's.
  auto result = sweep->result();
  if (t.world_size() > 1) {
    const CollectiveName name("learning-rate test");
    const auto curve = nlohmann::json::parse(
        t.strategy().broadcast(t.is_global_zero() ? nlohmann::json{result.lrs(), result.losses()}.dump() : ""));
    result = LRFinder(curve.at(0).get<std::vector<double>>(), curve.at(1).get<std::vector<double>>());
  }
  result = reported(std::move(result), t.is_global_zero());
  const auto lr = result.suggestion();
  if (!rate_key || !lr) return result;

  if (from_config) {
    auto optimizer = module.optimizer_config();  // {class_path, init_args}, as set_optimizer_config keeps it
    optimizer["init_args"]["lr"] = *lr;
    module.set_optimizer_config(std::move(optimizer), module.lr_scheduler_config());
  }
  if (hparam) set_hparam(module, *hparam, *lr);
  const auto before = first_rates(t.optimizer_configs());
  t.setup_optimizers(module);
  const auto after = first_rates(t.optimizer_configs());
  const std::string where = from_config ? "the config's optimizer" : "hparams()[\"" + *hparam + "\"]";
  ARC_CHECK(after != before || std::find(after.begin(), after.end(), *lr) != after.end(), "LearningRateFinder wrote ",
            *lr, " into ", where, ", but ", module.name(), "'s configure_optimizers() still builds its optimizer with ",
            "lr ", before.empty() ? 0.0 : before.front(), "; read the rate from ", where,
            " there, or set update_attr to false");
  if (t.is_global_zero()) console().info("LearningRateFinder: training starts at learning rate {} ({})", *lr, where);
  return result;
}

LRFinder Tuner::lr_find(TrainModule& module, DataModule& data, const LRFinderOptions& options) {
  return lr_find(module, training_data(data), options);
}

int64_t Tuner::scale_batch_size(TrainModule& module, DataModule& data, const BatchSizeOptions& options) {
  return scale_batch_size(module, training_data(data), options);
}

void check_batch_size_options(const BatchSizeOptions& options) {
  ARC_CHECK(options.mode() == "power" || options.mode() == "binsearch", "scale_batch_size: mode is \"", options.mode(),
            "\"; use \"power\" or \"binsearch\"");
  ARC_CHECK(options.init_val() >= 1 && options.max_trials() >= 1 && options.steps_per_trial() >= 1,
            "scale_batch_size: init_val, max_trials and steps_per_trial must be >= 1, got ", options.init_val(), ", ",
            options.max_trials(), " and ", options.steps_per_trial());
  ARC_CHECK(options.margin() >= 0 && options.margin() < 1, "scale_batch_size: margin is ", options.margin(),
            "; give a fraction from 0 to below 1 (0.05 lowers the size found by 5%)");
  ARC_CHECK(options.max_val() >= options.init_val(), "scale_batch_size: max_val (", options.max_val(),
            ") is below init_val (", options.init_val(), "); raise max_val or lower init_val");
}

namespace {

// Whether a LibTorch error is its allocator running out of memory: a GPU's "out of memory", the
// CPU's "can't allocate memory" (LibTorch 1.x) or "not enough memory" (2.x), as Lightning's is_oom_error.
bool out_of_memory(const c10::Error& error) {
  const std::string what = error.what();
  for (const char* sign : {"out of memory", "can't allocate memory", "not enough memory"})
    if (what.find(sign) != std::string::npos) return true;
  return false;
}

// Whether `trial` of batch size `size` ran without running out of memory; other errors go on.
bool fits_in_memory(int64_t size, const std::function<void()>& trial) {
  try {
    trial();
    return true;
  } catch (const std::bad_alloc&) {
  } catch (const c10::Error& error) {
    if (!out_of_memory(error)) throw;
  }
  console().info("scale_batch_size: batch size {} ran out of memory", size);
  return false;
}

// The search of scale_batch_size: `trial` trains on `train` with the batch size to try, which grows
// up to the dataset's size (a stream has no such bound) or max_val.
int64_t search_batch_size(const BatchSizeOptions& options, const DataSource& train,
                          const std::function<void(const DataSource&)>& trial) {
  const int64_t top = std::min(options.max_val(), train.dataset ? train.dataset->size() : kUnknownLength);
  // low: the largest size that fit; high: the smallest that did not (0: none yet).
  int64_t low = 0, high = 0, size = std::min(options.init_val(), top), tried = 0;
  for (int64_t count = 0; count < options.max_trials(); ++count) {
    DataSource sized = train;
    sized.options.batch_size(size);
    tried = size;
    if (fits_in_memory(size, [&] { trial(sized); })) {
      low = size;
      // Every size up to the dataset (or max_val) fits, or power mode met a size that did not.
      if (size >= top || (high > 0 && options.mode() == "power")) break;
      size = high > 0 ? (low + high) / 2 : std::min(size * 2, top);
    } else {
      ARC_CHECK(size > 1, "scale_batch_size: even a batch of 1 runs out of memory; make the model or its inputs ",
                "smaller, or train on a device with more memory");
      high = size;
      if (low > 0 && options.mode() == "power") break;
      size = low > 0 ? (low + high) / 2 : size / 2;  // before any size fit: halve, as Lightning's
    }
    if (high > 0 && high - low <= 1) break;
  }
  ARC_CHECK(low > 0, "scale_batch_size: no batch size fit in ", options.max_trials(), " trials (the last tried was ",
            tried, "); lower init_val (", options.init_val(), ") or raise max_trials");
  if (options.mode() == "binsearch" && options.margin() > 0) {
    const auto lowered = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(low) * (1 - options.margin())));
    if (lowered != low)
      console().info("scale_batch_size: margin {} lowers batch size {} to {}", options.margin(), low, lowered);
    low = lowered;
  }
  return low;
}

}  // namespace

int64_t Tuner::scale_batch_size(TrainModule& module, DataSource train, const BatchSizeOptions& options) {
  require_one_process();
  check_batch_size_options(options);
  ARC_CHECK(static_cast<bool>(train), "scale_batch_size got an empty DataSource; pass the training data, e.g. ",
            "{dataset, DataLoaderOptions(2)} (its batch size is what the trials change)");
  ARC_CHECK(train.combined == nullptr, "scale_batch_size changes one source's batch size, but the training data is a ",
            "CombinedLoader of ", train.combined ? train.combined->sources().size() : 0, " sources; scale each ",
            "source's batch size alone (pass that source), then combine them");
  const auto run_options = trial_options(options.steps_per_trial());
  const Restore restore(module, run_options.default_root_dir());
  const int64_t size = search_batch_size(
      options, train, [&](const DataSource& sized) { Trainer(run_options, {}, {}).fit(module, sized); });
  console().info("scale_batch_size: batch size {} fits", size);
  return size;
}

int64_t Tuner::scale_batch_size_in_fit(TrainModule& module, const BatchSizeOptions& options,
                                       const std::string& batch_arg_name) {
  check_batch_size_options(options);
  require_fit_start(
      "the batch-size search inside fit (BatchSizeFinder runs it at on_fit_start; "
      "Tuner::scale_batch_size runs it before fit)");
  ARC_CHECK(trainer_.world_size() == 1, "BatchSizeFinder searches in one process (as Lightning's), and this fit has ",
            trainer_.world_size(), " ranks; find the size with one device (arc scale_batch_size, or this fit with ",
            "devices=1), then give it to the DDP run's data");
  const DataSource train = trainer_.train_dataloader()->source();
  ARC_CHECK(train.combined == nullptr, "BatchSizeFinder changes one source's batch size, but the fit's training data ",
            "is a CombinedLoader; return one source from train_dataloader(), or remove BatchSizeFinder");
  const int64_t size = search_batch_size(options, train, [&](const DataSource& sized) {
    run_in_fit(module, trial_options(options.steps_per_trial()), nullptr, sized);
  });
  console().info("BatchSizeFinder: training with batch size {}", size);
  if (module.hparams().is_object() && module.hparams().contains(batch_arg_name))
    set_hparam(module, batch_arg_name, size);
  trainer_.set_train_batch_size(size);
  trainer_.setup_optimizers(module);
  return size;
}

}  // namespace arc
